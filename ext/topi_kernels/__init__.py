"""TE compute definitions, one module per op family; no schedule or tuner state."""
from tvm import tirx


def i64(v) -> tirx.IntImm:
    """``v`` as an int64 immediate (TE shapes and indices of ext's kernels are int64)."""
    return tirx.IntImm("int64", int(v))
