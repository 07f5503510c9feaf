#pragma once
// A tensor handed to the extension (any DLPack producer: torch, numpy), checked once and seen
// as a raw pointer. Every check throws strata::Error (strata.StrataError in Python) naming the
// argument, what it is, and what to pass instead: the Python wrappers pass `t.detach()`, so a
// failure here is a user's tensor that is on the wrong device, strided, or of the wrong dtype.
#include <cstddef>
#include <optional>
#include <string>

#include <nanobind/ndarray.h>

#include "core/dtype.h"

namespace strata::py {

using AnyArray = nanobind::ndarray<nanobind::ro>;  // read-only view: writes are our own business
using MutArray = nanobind::ndarray<>;

struct TensorView {
  std::byte* data = nullptr;
  std::size_t numel = 0;
  std::size_t nbytes = 0;
  std::size_t itemsize = 0;
  std::optional<DType> dtype;  // f32 / bf16 / f16, nullopt for any other dtype
  std::string dtype_name;      // "float32", "int64", ... for messages
};

// Host memory, C-contiguous (a tensor with zero or one elements passes whatever its strides).
// `what` names the argument in errors ("grad of param 3").
TensorView host_view(const MutArray& a, const std::string& what);
TensorView host_view(const AnyArray& a, const std::string& what);

// host_view, and its dtype must be one strata computes with (fp32, bf16, fp16).
TensorView float_view(const MutArray& a, const std::string& what);
TensorView float_view(const AnyArray& a, const std::string& what);

// Throws unless the dtype is exactly `want`.
void require_dtype(const TensorView& v, DType want, const std::string& what);
// Throws unless both hold the same number of elements.
void require_same_numel(const TensorView& a, const TensorView& b, const std::string& what_a,
                        const std::string& what_b);

}  // namespace strata::py
