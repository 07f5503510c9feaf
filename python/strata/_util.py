"""Helpers the package's modules share: errors in strata's format, the thread count."""
import os

from strata._strata import StrataError


def error(what, where="", hint=""):
    """A StrataError as strata::Error composes it: "what [where]. What to do: hint"."""
    text = what
    if where:
        text += f" [{where}]"
    if hint:
        text += f". What to do: {hint}"
    exc = StrataError(text)
    exc.what_happened, exc.where, exc.hint = what, where, hint
    return exc


def resolve_threads(threads):
    """threads given, else STRATA_CPU_THREADS, else 0 (every CPU of the affinity mask)."""
    if threads is None:
        env = os.environ.get("STRATA_CPU_THREADS", "").strip()
        if not env:
            return 0
        try:
            threads = int(env)
        except ValueError:
            raise error(f"STRATA_CPU_THREADS={env!r} is not an integer", "STRATA_CPU_THREADS",
                        "set it to a thread count, or unset it for every CPU") from None
    if not isinstance(threads, int) or threads < 0:
        raise error(f"threads={threads!r} is not a count >= 0", "threads",
                    "pass 0 (every CPU) or a positive integer")
    return threads


def param_name(group_index, index_in_group):
    return f"param_groups[{group_index}]['params'][{index_in_group}]"
