"""python -m strata.bench adam|aio|offload [--json]: strata's Python package against the
limits measured in the same run (a same-pattern memory kernel, fio on the same file, the
resident step) and against the peers importable here (torch's AdamW; DeepSpeed's CPU Adam and
aio_handle when deepspeed imports and its ops build)."""
