// strata._strata: the extension module behind the `strata` Python package. It links strata's
// core, cpu_adam and offload libraries (never libtorch): tensors arrive by DLPack.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "engine_box.h"

namespace nb = nanobind;

namespace strata::py {
void bind_adam(nb::module_& m);
void bind_bench(nb::module_& m);
}

NB_MODULE(_strata, m) {
  // strata::Error -> strata.StrataError (a RuntimeError), its message "what [where]. What to
  // do: hint", with what / where / hint also as attributes.
  static nb::object error_type = nb::steal(PyErr_NewException("strata.StrataError", PyExc_RuntimeError, nullptr));
  m.attr("StrataError") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const strata::Error& e) {
      nb::object exc = error_type(e.what());
      nb::setattr(exc, "what_happened", nb::str(e.what_happened().c_str()));
      nb::setattr(exc, "where", nb::str(e.where().c_str()));
      nb::setattr(exc, "hint", nb::str(e.hint().c_str()));
      PyErr_SetObject(error_type.ptr(), exc.ptr());
    }
  });
  m.def("simd_level", [] { return std::string(strata::simd_name(strata::active_simd())); });
  m.def("cpu_count", [] { return strata::cpu_info().logical_cores_in_affinity_mask; },
        "CPUs of this process's affinity mask.");
  strata::py::bind_adam(m);
  strata::py::bind_io(m);
  strata::py::bind_swap(m);
  strata::py::bind_bench(m);
}
