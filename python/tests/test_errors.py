"""strata.StrataError: strata::Error becomes one Python exception type whose message says what
happened, where, and what to do; bad tensors are refused before anything is written."""
import pytest

torch = pytest.importorskip("torch")
import strata  # noqa: E402
from strata import _strata  # noqa: E402


def _adam(p, g, m, v, **kw):
    args = dict(step=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, adamw=True,
                bias_correction=True)
    args.update(kw)
    _strata.adam_step(p, g, m, v, **args)


def test_error_type_is_runtime_error_with_parts():
    assert issubclass(strata.StrataError, RuntimeError)
    p, m, v = torch.zeros(8), torch.zeros(8), torch.zeros(8)
    with pytest.raises(strata.StrataError) as e:
        _adam(p, torch.zeros(4), m, v)
    assert "grads has 4 elements but params has 8" in str(e.value)
    assert e.value.where == "grads"
    assert "What to do" in str(e.value) and e.value.hint


def test_non_contiguous_and_dtype_refused_untouched():
    p = torch.randn(4, 4)
    before = p.clone()
    with pytest.raises(strata.StrataError, match="not contiguous"):
        _adam(p.t(), torch.zeros(4, 4), torch.zeros(4, 4), torch.zeros(4, 4))
    with pytest.raises(strata.StrataError, match="dtype int64"):
        _adam(p, torch.zeros(4, 4, dtype=torch.int64), torch.zeros(4, 4), torch.zeros(4, 4))
    with pytest.raises(strata.StrataError, match="lr"):
        _adam(p, torch.zeros(4, 4), torch.zeros(4, 4), torch.zeros(4, 4), lr=float("nan"))
    assert torch.equal(p, before)
