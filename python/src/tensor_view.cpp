#include "tensor_view.h"

#include <fmt/format.h>

#include "core/error.h"

namespace nb = nanobind;

namespace strata::py {
namespace {

std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  const char* kind = "unknown";
  switch (static_cast<C>(t.code)) {
    case C::Int: kind = "int"; break;
    case C::UInt: kind = "uint"; break;
    case C::Float: kind = "float"; break;
    case C::Bfloat: kind = "bfloat"; break;
    case C::Complex: kind = "complex"; break;
    case C::Bool: kind = "bool"; break;
    default: break;
  }
  if (static_cast<C>(t.code) == C::Bool) return "bool";
  return fmt::format("{}{}", kind, t.bits);
}

std::optional<DType> strata_dtype(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  if (static_cast<C>(t.code) == C::Float && t.bits == 32) return DType::f32;
  if (static_cast<C>(t.code) == C::Float && t.bits == 16) return DType::f16;
  if (static_cast<C>(t.code) == C::Bfloat && t.bits == 16) return DType::bf16;
  return std::nullopt;
}

template <typename Array>
TensorView view_of(const Array& a, const std::string& what) {
  if (a.device_type() != nb::device::cpu::value) {
    throw Error(fmt::format("{} is not in host memory (DLPack device type {})", what,
                            a.device_type()),
                what, "pass a CPU tensor (tensor.cpu(), or strata.io.pinned_empty for pinned memory)");
  }
  TensorView v;
  v.itemsize = (a.dtype().bits * a.dtype().lanes + 7) / 8;
  v.numel = a.size();
  v.nbytes = v.numel * v.itemsize;
  v.dtype = strata_dtype(a.dtype());
  v.dtype_name = dlpack_dtype_name(a.dtype());
  // C-contiguous: strides (in elements) are the suffix products of the shape; dimensions of
  // size 1 may carry any stride (torch gives them arbitrary ones).
  if (v.numel > 1) {
    std::int64_t expect = 1;
    for (std::size_t d = a.ndim(); d-- > 0;) {
      if (a.shape(d) != 1 && a.stride(d) != expect) {
        throw Error(fmt::format("{} is not contiguous (shape and strides do not match a dense "
                                "row-major layout)", what),
                    what, "pass tensor.contiguous()");
      }
      expect *= static_cast<std::int64_t>(a.shape(d));
    }
  }
  v.data = static_cast<std::byte*>(const_cast<void*>(static_cast<const void*>(a.data())));
  if (v.data == nullptr && v.numel > 0) throw Error(fmt::format("{} has no storage", what), what);
  return v;
}

TensorView float_of(TensorView v, const std::string& what) {
  if (!v.dtype) {
    throw Error(fmt::format("{} has dtype {}, which strata does not compute with", what,
                            v.dtype_name),
                what, "use torch.float32, torch.bfloat16 or torch.float16");
  }
  return v;
}

}  // namespace

TensorView host_view(const MutArray& a, const std::string& what) { return view_of(a, what); }
TensorView host_view(const AnyArray& a, const std::string& what) { return view_of(a, what); }
TensorView float_view(const MutArray& a, const std::string& what) {
  return float_of(view_of(a, what), what);
}
TensorView float_view(const AnyArray& a, const std::string& what) {
  return float_of(view_of(a, what), what);
}

void require_dtype(const TensorView& v, DType want, const std::string& what) {
  if (v.dtype != want) {
    throw Error(fmt::format("{} has dtype {}, expected {}", what, v.dtype_name, dtype_name(want)),
                what, fmt::format("pass a {} tensor", dtype_name(want)));
  }
}

void require_same_numel(const TensorView& a, const TensorView& b, const std::string& what_a,
                        const std::string& what_b) {
  if (a.numel != b.numel) {
    throw Error(fmt::format("{} has {} elements but {} has {}", what_a, a.numel, what_b, b.numel),
                what_a, "a parameter must keep its shape for the optimizer's life");
  }
}

}  // namespace strata::py
