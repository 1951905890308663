"""The ctypes side of the native ABI against cuda/include/pyg_ioaware.h.

The header is parsed (every ``PYGIO_API`` prototype, every ``typedef struct``
and the ``pygio_struct_kind`` enum) and compared with ``_native._SIGNATURES``
and the ctypes Structures' ``_fields_``. Where the library is loaded (CI
builds it with nvcc even without a GPU) the struct sizes it reports are
compared too, and the entries are called with arguments that fail or finish
before any device work, so none of this needs a GPU.
"""
import ctypes
import pathlib
import re
import threading

import pytest
import torch

from pyg_ioaware import _native

HEADER = pathlib.Path(__file__).resolve().parents[1] / "cuda" / "include" / "pyg_ioaware.h"

C_SCALARS = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "char*": ctypes.c_char_p,
    "void*": ctypes.c_void_p,
}
PYGIO_ERR_INVALID_ARGUMENT = 1


def _header_text() -> str:
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _declaration(decl: str) -> tuple:
    """'const pygio_csr* a' -> ('pygio_csr*', 'a')."""
    decl = " ".join(decl.replace("const ", " ").split())
    match = re.fullmatch(r"(\w+(?:\s*\*)*)\s*\b(\w+)", decl)
    assert match, f"cannot parse declaration {decl!r}"
    return match.group(1).replace(" ", ""), match.group(2)


def _parse_header():
    text = _header_text()
    structs = {}
    for body, name in re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        structs[name] = [_declaration(f) for f in body.split(";") if f.strip()]
    opaque = set(re.findall(r"typedef\s+struct\s+(\w+)\s+\1\s*;", text))
    prototypes = {}
    for ret, name, args in re.findall(r"PYGIO_API\s+([\w\s\*]+?)\s*\b(pygio_\w+)\s*\((.*?)\)\s*;",
                                      text, re.S):
        args = [] if args.strip() == "void" else [_declaration(a)[0] for a in args.split(",")]
        prototypes[name] = (args, " ".join(ret.replace("const ", "").split()).replace(" ", ""))
    kinds = dict(re.findall(r"PYGIO_STRUCT_(\w+)\s*=\s*(\d+)", text))
    return structs, opaque, prototypes, kinds


STRUCTS, OPAQUE, PROTOTYPES, STRUCT_KINDS = _parse_header()


def _c_name(structure: type) -> str:
    """SpmmPlanParams -> pygio_spmm_plan_params."""
    return "pygio_" + re.sub(r"(?<!^)([A-Z])", r"_\1", structure.__name__).lower()


PY_STRUCTS = {
    _c_name(cls): cls for cls in vars(_native).values()
    if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and hasattr(cls, "_fields_")
}


def _ctype(c_type: str):
    """The ctypes type a C type maps to (None for void)."""
    if c_type == "void":
        return None
    if c_type in C_SCALARS:
        return C_SCALARS[c_type]
    if c_type.endswith("*"):
        base = c_type[:-1]
        if base in OPAQUE:  # a handle: passed as void*
            return ctypes.c_void_p
        return ctypes.POINTER(_ctype(base))
    if c_type in PY_STRUCTS:
        return PY_STRUCTS[c_type]
    raise AssertionError(f"no ctypes mapping for C type {c_type!r}")


def test_header_parses():
    assert {"pygio_csr", "pygio_spmm_plan_params", "pygio_spmm_params",
            "pygio_sddmm_params"} <= set(STRUCTS)
    assert "pygio_spmm_plan" in OPAQUE
    assert {"pygio_spmm_run", "pygio_sddmm", "pygio_struct_size"} <= set(PROTOTYPES)


def test_every_header_struct_has_a_structure():
    assert set(PY_STRUCTS) == set(STRUCTS)


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_structure_fields_match_header(name):
    expected = [(field, _ctype(c_type)) for c_type, field in STRUCTS[name]]
    assert list(PY_STRUCTS[name]._fields_) == expected


@pytest.mark.parametrize("name", sorted(n for n in STRUCTS if n.endswith("_params")))
def test_params_structs_lead_with_struct_size(name):
    assert STRUCTS[name][0] == ("int32_t", "struct_size")


def test_every_prototype_has_a_signature():
    assert set(_native._SIGNATURES) == set(PROTOTYPES)


@pytest.mark.parametrize("name", sorted(PROTOTYPES))
def test_signature_matches_header(name):
    args, ret = PROTOTYPES[name]
    argtypes, restype = _native._SIGNATURES[name]
    assert len(argtypes) == len(args)
    assert list(argtypes) == [_ctype(a) for a in args]
    assert restype == _ctype(ret)


def test_struct_kinds_cover_every_struct():
    assert {f"pygio_{kind.lower()}" for kind in STRUCT_KINDS} == set(STRUCTS)


def test_abi_versions_agree():
    version = re.search(r"#define\s+PYGIO_ABI_VERSION\s+(\d+)", HEADER.read_text()).group(1)
    assert int(version) == _native.ABI_VERSION


def test_index_bits():
    assert _native.index_bits(torch.int32) == 32
    assert _native.index_bits(torch.int64) == 64
    for dtype in (torch.int16, torch.int8, torch.uint8, torch.float32):
        with pytest.raises(TypeError, match="int32 or torch.int64"):
            _native.index_bits(dtype)


def test_wrappers_reject_unsupported_index_dtypes():
    x = torch.zeros(3, 2)
    out = torch.zeros(2)
    for rowptr, col, match in (
            (torch.tensor([0, 1, 2], dtype=torch.int16), torch.tensor([0, 1], dtype=torch.int16),
             "int32 or torch.int64"),
            (torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 1]), "share")):
        with pytest.raises(TypeError, match=match):
            _native.sddmm(rowptr, col, x, x, out)
        with pytest.raises(TypeError, match=match):
            _native.spmm_plan_create(rowptr, col, 3, 2, torch.float32, False, 0)


def test_spmm_wrapper_takes_the_bias_in_the_values_dtype():
    """pygio_spmm_csr reads the bias in values_dtype (fp32 values with 16-bit
    x): a bias of another dtype is refused before anything is launched (a
    bf16 one would be read as fp32, past its end)."""
    rowptr, col = torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 1],
                                                                          dtype=torch.int32)
    x, out = torch.zeros(2, 4, dtype=torch.bfloat16), torch.zeros(2, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="values' dtype"):
        _native.spmm_csr(rowptr, col, torch.ones(2), x, torch.zeros(4, dtype=torch.bfloat16),
                         out, False, False)


# ------------------------------------------------- against the loaded library
needs_library = pytest.mark.skipif(_native.library() is None,
                                   reason="native library not built or not found")


def _params(name: str, **fields):
    structure = PY_STRUCTS[name]
    return structure(struct_size=ctypes.sizeof(structure), **fields)


def _call(name: str, params) -> tuple:
    """Calls entry ``name`` with ``params`` and zeroed out-arguments;
    returns (status, message)."""
    lib = _native.library()
    argtypes, _ = _native._SIGNATURES[name]
    extra = [ctypes.byref(t._type_()) for t in argtypes[1:]]
    status = getattr(lib, name)(ctypes.byref(params), *extra)
    return status, lib.pygio_last_error().decode()


PARAMS_ENTRIES = sorted(name for name, (args, _) in PROTOTYPES.items()
                        if args and args[0].endswith("_params*"))


@needs_library
def test_library_abi_version():
    assert _native.library().pygio_abi_version() == _native.ABI_VERSION


@needs_library
@pytest.mark.parametrize("kind", sorted(STRUCT_KINDS))
def test_struct_sizes_match_library(kind):
    structure = PY_STRUCTS[f"pygio_{kind.lower()}"]
    assert _native.library().pygio_struct_size(int(STRUCT_KINDS[kind])) == \
        ctypes.sizeof(structure)


@needs_library
def test_unknown_struct_kind_has_no_size():
    assert _native.library().pygio_struct_size(len(STRUCT_KINDS)) == 0


@needs_library
@pytest.mark.parametrize("entry", PARAMS_ENTRIES)
@pytest.mark.parametrize("delta", [-8, -1, 4, 64])
def test_wrong_struct_size_is_rejected(entry, delta):
    struct_name = PROTOTYPES[entry][0][0][:-1]
    params = _params(struct_name)
    params.struct_size += delta
    status, message = _call(entry, params)
    assert status == PYGIO_ERR_INVALID_ARGUMENT
    assert entry in message and "struct_size" in message
    assert str(ctypes.sizeof(params)) in message


@needs_library
@pytest.mark.parametrize("entry", PARAMS_ENTRIES)
def test_null_params_are_rejected(entry):
    lib = _native.library()
    argtypes, _ = _native._SIGNATURES[entry]
    extra = [ctypes.byref(t._type_()) for t in argtypes[1:]]
    assert getattr(lib, entry)(None, *extra) == PYGIO_ERR_INVALID_ARGUMENT
    assert "params is NULL" in lib.pygio_last_error().decode()


@needs_library
def test_empty_sddmm_needs_no_device():
    status, message = _call("pygio_sddmm", _params("pygio_sddmm_params",
                                                   a=_native.Csr(index_bits=32)))
    assert (status, message) == (0, "")


@needs_library
@pytest.mark.parametrize("bits", [0, 8, 16, 63, 128])
def test_library_rejects_index_bits_other_than_32_or_64(bits):
    csr = _native.Csr(index_bits=bits)
    for entry, params in (
            ("pygio_sddmm", _params("pygio_sddmm_params", a=csr)),
            ("pygio_spmm_plan_create", _params("pygio_spmm_plan_params", a=csr, width=1))):
        status, message = _call(entry, params)
        assert status == PYGIO_ERR_INVALID_ARGUMENT
        assert "index_bits must be 32 or 64" in message


@needs_library
def test_library_rejects_unknown_dtype_and_short_row_strides():
    csr = dict(num_rows=1, num_cols=1, nnz=1, rowptr=8, col=8, index_bits=32)
    status, message = _call("pygio_sddmm", _params("pygio_sddmm_params", dtype=9,
                                                   a=_native.Csr(**csr)))
    assert status == PYGIO_ERR_INVALID_ARGUMENT and "dtype" in message
    status, message = _call("pygio_sddmm", _params(
        "pygio_sddmm_params", a=_native.Csr(**csr), width=4, g=8, x=8, out=8,
        g_row_stride=4, x_row_stride=3))
    assert status == PYGIO_ERR_INVALID_ARGUMENT and "x row stride 3" in message


@needs_library
def test_own_spmm_checks_its_parameters():
    """pygio_spmm_csr refuses, before touching the device, what would make
    its kernels read or write out of bounds."""
    def call(**fields):
        a = dict(num_rows=2, num_cols=2, nnz=0, rowptr=16, col=16, index_bits=32)
        a.update(fields.pop("a", {}))
        base = dict(dtype=0, values_dtype=0, width=4, y=16, y_row_stride=4, x_row_stride=4,
                    degree_bound=-1)
        base.update(fields)
        return _call("pygio_spmm_csr", _params("pygio_spmm_csr_params",
                                               a=_native.Csr(**a), **base))

    cases = [
        (dict(a=dict(rowptr=None)), "rowptr must not be NULL"),
        (dict(a=dict(index_bits=16)), "index_bits must be 32 or 64"),
        (dict(values_dtype=1), "values_dtype"),
        (dict(transpose=1, bias=16), "no bias"),
        (dict(transpose=2), "transpose must be 0 or 1"),
        (dict(y_row_stride=3), "y row stride 3"),
        (dict(y=None), "y must not be NULL"),
        (dict(a=dict(nnz=5), values=16, x=16, x_row_stride=2), "x row stride 2"),
        (dict(a=dict(nnz=5), values=None, x=16), "values and x must not be NULL"),
        (dict(dtype=3, a=dict(nnz=5000, num_rows=4), values=16, x=16), "needs a workspace"),
    ]
    for fields, expected in cases:
        status, message = call(**fields)
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
    # Rows bounded below the hub degree: no hub can exist, no workspace is needed.
    size = ctypes.c_size_t(1)
    for bound, needed in ((-1, True), (256, False), (257, True)):
        params = _params("pygio_spmm_csr_params", dtype=0, values_dtype=0, width=4,
                         a=_native.Csr(num_rows=4, num_cols=2, nnz=5000, rowptr=16, col=16,
                                       index_bits=32), degree_bound=bound)
        assert _native.library().pygio_spmm_csr_workspace_size(
            ctypes.byref(params), ctypes.byref(size)) == 0
        assert (size.value > 0) == needed, bound


def _int64_at(address):
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_int64))


# A forward / backward whose sizes are consistent and whose pointers are
# non-NULL and aligned (fake addresses): every case below breaks one thing,
# so the entry must refuse before it touches the device.
MINMAX_CSR = dict(num_rows=2, num_cols=3, nnz=4, rowptr=16, col=16, index_bits=32)
MINMAX_FORWARD = dict(dtype=0, reduce=1, width=4, x=16, x_row_stride=4, out=16,
                      out_row_stride=4)
MINMAX_BACKWARD = dict(dtype=0, reduce=1, deterministic=0, width=4, x=16, x_row_stride=4,
                       out=16, out_row_stride=4, grad_out=16, grad_out_row_stride=4,
                       grad_x=16, grad_x_row_stride=4)


def _minmax_params(backward: bool, fields: dict):
    fields = dict(fields)
    a = dict(MINMAX_CSR, **fields.pop("a", {}))
    base = dict(MINMAX_BACKWARD if backward else MINMAX_FORWARD, arg=32, arg_bytes=2)
    if backward:
        a_t = dict(num_rows=a["num_cols"], num_cols=a["num_rows"], nnz=a["nnz"], rowptr=16,
                   col=16, index_bits=a["index_bits"])
        a_t.update(fields.pop("a_t", {}))
        base["a_t"] = _native.Csr(**a_t)
    base.update(fields)
    name = "pygio_minmax_backward_params" if backward else "pygio_minmax_params"
    return _params(name, a=_native.Csr(**a), **base)


def _minmax_workspace(backward: bool, **fields) -> tuple:
    """(status, bytes) of pygio_minmax[_backward]_workspace_size."""
    entry = "pygio_minmax_backward_workspace_size" if backward else "pygio_minmax_workspace_size"
    size = ctypes.c_size_t(12345)
    status = getattr(_native.library(), entry)(ctypes.byref(_minmax_params(backward, fields)),
                                               ctypes.byref(size))
    return status, size.value


@needs_library
def test_own_minmax_checks_its_parameters():
    """pygio_minmax refuses, before touching the device, what would make its
    kernels read or write out of bounds (or misread the arg codes)."""
    hub = dict(hub_degree=_int64_at(16), max_hubs=2, a=dict(nnz=600))  # 2 hub slots
    cases = [
        (dict(reduce=2), "reduce must be 0 or 1"),
        (dict(reduce=-1), "reduce must be 0 or 1"),
        (dict(width=-1), "width must be non-negative"),
        (dict(a=dict(num_cols=2**31)), "num_cols must be below 2^31"),
        (dict(a=dict(index_bits=16)), "index_bits must be 32 or 64"),
        (dict(a=dict(nnz=-1)), "sizes must be non-negative"),
        (dict(dtype=4), "unknown dtype code 4"),
        (dict(max_hubs=-1), "max_hubs must be non-negative"),
        (dict(out=None), "rowptr and out must not be NULL"),
        (dict(a=dict(rowptr=None, nnz=0)), "rowptr and out must not be NULL"),
        (dict(a=dict(rowptr=None)), "rowptr / col must not be NULL"),
        (dict(out_row_stride=3), "out row stride 3"),
        (dict(arg=36), "arg must be 16-byte aligned"),
        (dict(arg=4), "arg must be 16-byte aligned"),
        (dict(arg_bytes=4), "arg_bytes must be 1 or 2"),
        (dict(arg_bytes=0), "arg_bytes must be 1 or 2"),
        (hub, "needs a workspace"),
        (dict(hub, workspace=24), "workspace must be 16-byte aligned"),
        (dict(x=None), "x must not be NULL"),
        (dict(x_row_stride=3), "x row stride 3"),
    ]
    for fields, expected in cases:
        status, message = _call("pygio_minmax", _minmax_params(False, fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith("pygio_minmax:"), message
        status, _ = _minmax_workspace(False, **fields)
        size_checked = any(word in expected for word in ("reduce", "width", "num_cols",
                                                         "index_bits", "sizes", "dtype",
                                                         "max_hubs", "rowptr / col"))
        assert (status == PYGIO_ERR_INVALID_ARGUMENT) == size_checked, (fields, status)
    # Nothing to do needs no device (and no pointer at all).
    for fields in (dict(a=dict(num_rows=0, nnz=0, rowptr=None, col=None), out=None, x=None),
                   dict(width=0, out=None, x=None, arg=None)):
        assert _call("pygio_minmax", _minmax_params(False, fields)) == (0, ""), fields


@needs_library
def test_minmax_workspace_sizes():
    """Hub slots only where a row can be split: never for fp64, never
    without a threshold, at most nnz / 257 and num_rows of them."""
    hub = dict(hub_degree=_int64_at(16), max_hubs=2, a=dict(nnz=600))
    assert _minmax_workspace(False) == (0, 0)
    status, two = _minmax_workspace(False, **hub)
    assert status == 0 and two % 16 == 0 and two >= 2 * 4 * 8 + 2 * 16  # words + hub list
    assert _minmax_workspace(False, **dict(hub, max_hubs=100)) == (0, two)  # 600 // 257 = 2
    status, one = _minmax_workspace(False, **dict(hub, max_hubs=1))
    assert status == 0 and 0 < one < two
    assert _minmax_workspace(False, **dict(hub, dtype=1)) == (0, 0)  # fp64 is never split
    assert _minmax_workspace(False, **dict(hub, a=dict(nnz=256))) == (0, 0)  # no row > 256
    assert _minmax_workspace(False, **dict(hub, hub_degree=None)) == (0, 0)
    status, message = _call("pygio_minmax_workspace_size", _minmax_params(False, {}))
    assert status == 0  # (_call passes a real out-argument)
    lib = _native.library()
    assert lib.pygio_minmax_workspace_size(ctypes.byref(_minmax_params(False, {})),
                                           None) == PYGIO_ERR_INVALID_ARGUMENT
    assert "bytes must not be NULL" in lib.pygio_last_error().decode()
    # backward: the fp32 accumulator of 16-bit grad_x, every element's share
    # when deterministic (with its long sources' list and chunk sums), match
    # counts per hub element (fp64 included)
    assert _minmax_workspace(True) == (0, 0)
    status, half = _minmax_workspace(True, dtype=2)
    assert status == 0 and half >= 3 * 4 * 4
    status, deterministic = _minmax_workspace(True, deterministic=1)
    assert status == 0 and deterministic >= 2 * 4 * 4
    status, fp64_hubs = _minmax_workspace(True, dtype=1, **hub)
    assert status == 0 and fp64_hubs >= 2 * 4 * 8 + 2 * 16
    status, long_sources = _minmax_workspace(True, deterministic=1, a=dict(nnz=600))
    # + counter, two list entries, 600 // 256 + 2 chunk rows of 4 floats
    assert status == 0 and long_sources >= deterministic + 16 + 2 * 16 + 4 * 4 * 4
    assert _minmax_workspace(True, deterministic=1, **hub) == (0, long_sources)  # no row hubs
    assert lib.pygio_minmax_backward_workspace_size(
        ctypes.byref(_minmax_params(True, {})), None) == PYGIO_ERR_INVALID_ARGUMENT


@needs_library
def test_own_minmax_backward_checks_its_parameters():
    hub = dict(hub_degree=_int64_at(16), max_hubs=2, a=dict(nnz=600))
    null_message = "rowptr, out, arg and grad_out must not be NULL, arg 16-byte aligned"
    cases = [
        (dict(reduce=3), "reduce must be 0 or 1"),
        (dict(width=-2), "width must be non-negative"),
        (dict(a=dict(num_cols=2**31)), "num_cols must be below 2^31"),
        (dict(a=dict(index_bits=8)), "index_bits must be 32 or 64"),
        (dict(dtype=-1), "unknown dtype code -1"),
        (dict(deterministic=2), "deterministic must be 0 or 1"),
        (dict(deterministic=1, a_t=dict(num_rows=2)), "a_t must be the transpose of a"),
        (dict(deterministic=1, a_t=dict(num_cols=3)), "a_t must be the transpose of a"),
        (dict(deterministic=1, a_t=dict(nnz=5)), "a_t must be the transpose of a"),
        (dict(deterministic=1, a_t=dict(index_bits=64)), "a_t must be the transpose of a"),
        (dict(deterministic=1, a_t=dict(index_bits=16)), "index_bits must be 32 or 64"),
        (dict(deterministic=1, a_t=dict(col=None)), "rowptr / col must not be NULL"),

        (dict(grad_x=None), "grad_x must not be NULL"),
        (dict(grad_x_row_stride=3), "grad_x row stride 3"),
        (dict(dtype=2), "needs a workspace"),          # fp16: fp32 accumulator
        (dict(dtype=3), "needs a workspace"),          # bf16
        (dict(deterministic=1), "needs a workspace"),  # every element's share
        (hub, "needs a workspace"),                    # hub match counts
        (dict(dtype=2, workspace=8), "workspace must be 16-byte aligned"),
        (dict(arg=36), null_message),
        (dict(arg=None), null_message),
        (dict(arg_bytes=3), "arg_bytes must be 1 or 2"),
        (dict(out=None), null_message),
        (dict(grad_out=None), null_message),
        (dict(a=dict(rowptr=None, nnz=0), a_t=dict(nnz=0)), null_message),
        (dict(out_row_stride=2), "out row stride 2"),
        (dict(grad_out_row_stride=1), "grad_out row stride 1"),
        (dict(deterministic=1, workspace=16, a=dict(nnz=0), a_t=dict(nnz=0, rowptr=None)),
         "a_t.rowptr must not be NULL"),
        (dict(deterministic=1, a=dict(num_rows=0, nnz=0),
              a_t=dict(num_cols=0, nnz=0, rowptr=None), arg=None, out=None, grad_out=None),
         "a_t.rowptr must not be NULL"),
        (dict(x=None), "x must not be NULL"),
        (dict(x_row_stride=3), "x row stride 3"),
    ]
    for fields, expected in cases:
        status, message = _call("pygio_minmax_backward", _minmax_params(True, fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith("pygio_minmax_backward:"), message
    # Nothing to do needs no device: no sources (grad_x is empty) or width 0.
    for fields in (dict(a=dict(num_cols=0, nnz=0), grad_x=None, x=None),
                   dict(width=0, grad_x=None, x=None, out=None, arg=None, grad_out=None)):
        assert _call("pygio_minmax_backward", _minmax_params(True, fields)) == (0, ""), fields


def _float_at(address):
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_float))


# A GATv2 forward / backward / attention-weights call with consistent sizes
# (2 destinations, 3 sources, 4 entries, 2 heads of 4 channels) and non-NULL,
# aligned fake pointers: every case below breaks one thing, so the entry
# must refuse before it touches the device.
PYGIO_ERR_UNSUPPORTED = 5
GATV2_CSR = dict(num_rows=2, num_cols=3, nnz=4, rowptr=16, col=16, index_bits=32)
GATV2_INPUTS = dict(dtype=0, heads=2, channels=4, x_l=16, x_l_row_stride=8, x_r=16,
                    x_r_row_stride=8, negative_slope=0.2)
GATV2_NAMES = {"forward": "pygio_gatv2_params", "backward": "pygio_gatv2_backward_params",
               "alpha": "pygio_gatv2_alpha_params"}
GATV2_HUB = dict(hub_degree=_int64_at(16), max_hubs=2, a=dict(nnz=600))  # 2 hub slots


def _gatv2_params(kind: str, fields: dict):
    fields = dict(fields)
    a = dict(GATV2_CSR, **fields.pop("a", {}))
    base = dict(GATV2_INPUTS, att=_float_at(16))
    if kind == "forward":
        base.update(out=16, lse=_float_at(16))
    elif kind == "backward":
        a_t = dict(num_rows=a["num_cols"], num_cols=a["num_rows"], nnz=a["nnz"], rowptr=16,
                   col=16, index_bits=a["index_bits"])
        a_t.update(fields.pop("a_t", {}))
        base.update(a_t=_native.Csr(**a_t), perm_t=16, lse=_float_at(16), grad_out=16,
                    grad_x_l=16, grad_x_l_row_stride=8, grad_x_r=16, grad_x_r_row_stride=8,
                    grad_att=_float_at(16), workspace=16)
    else:
        base.update(lse=_float_at(16), alpha=_float_at(16))
    base.update(fields)
    return _params(GATV2_NAMES[kind], a=_native.Csr(**a), **base)


def _gatv2_workspace(kind: str, **fields) -> tuple:
    """(status, bytes) of pygio_gatv2[_backward]_workspace_size."""
    entry = "pygio_gatv2_workspace_size" if kind == "forward" else \
        "pygio_gatv2_backward_workspace_size"
    size = ctypes.c_size_t(12345)
    status = getattr(_native.library(), entry)(ctypes.byref(_gatv2_params(kind, fields)),
                                               ctypes.byref(size))
    return status, size.value


# Checks every GATv2 entry applies to the inputs they share: (fields, message).
GATV2_SHARED_CASES = [
    (dict(dtype=1), "dtype must be float32, float16 or bfloat16, got code 1"),
    (dict(dtype=9), "dtype must be float32, float16 or bfloat16, got code 9"),
    (dict(heads=0), "heads and channels must be positive"),
    (dict(channels=-4), "heads and channels must be positive"),
    (dict(a=dict(index_bits=16)), "index_bits must be 32 or 64"),
    (dict(a=dict(nnz=-1)), "sizes must be non-negative"),
    (dict(a=dict(col=None)), "rowptr / col must not be NULL"),
    (dict(a=dict(rowptr=None, nnz=0)), "rowptr, x_r and att must not be NULL"),
    (dict(x_r=None), "rowptr, x_r and att must not be NULL"),
    (dict(att=None), "rowptr, x_r and att must not be NULL"),
    (dict(x_r_row_stride=7), "x_r row stride 7 is less than the width 8"),
    (dict(x_l=None), "x_l must not be NULL"),
    (dict(x_l_row_stride=3), "x_l row stride 3 is less than the width 8"),
]


@needs_library
def test_own_gatv2_checks_its_parameters():
    """pygio_gatv2 refuses, before touching the device, what would make its
    kernels read or write out of bounds."""
    cases = GATV2_SHARED_CASES + [
        (dict(dropout_p=1.0), "dropout_p must lie in [0, 1)"),
        (dict(dropout_p=-0.1), "dropout_p must lie in [0, 1)"),
        (dict(dropout_p=float("nan")), "dropout_p must lie in [0, 1)"),
        (dict(max_hubs=-1), "max_hubs must be non-negative"),
        (dict(out=None), "out and lse must not be NULL"),
        (dict(lse=None), "out and lse must not be NULL"),
        (GATV2_HUB, "needs a workspace"),
        (dict(GATV2_HUB, workspace=24), "workspace must be 16-byte aligned"),
    ]
    for fields, expected in cases:
        status, message = _call("pygio_gatv2", _gatv2_params("forward", fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith("pygio_gatv2:"), message
        status, _ = _gatv2_workspace("forward", **fields)
        size_checked = (fields, expected) in GATV2_SHARED_CASES or "max_hubs" in expected
        assert (status == PYGIO_ERR_INVALID_ARGUMENT) == size_checked, (fields, status)
    # Heads the kernels cannot hold: over 1024 channels, or over 256 where
    # the rows cannot be read in 16-byte pieces (x_l 8-byte aligned).
    for fields in (dict(channels=1028, x_l_row_stride=2056, x_r_row_stride=2056),
                   dict(channels=260, x_l_row_stride=520, x_r_row_stride=520, x_l=24)):
        status, message = _call("pygio_gatv2", _gatv2_params("forward", fields))
        assert status == PYGIO_ERR_UNSUPPORTED and "are not supported" in message, message
    # Nothing to do needs no device (and no pointer at all).
    empty = dict(a=dict(num_rows=0, nnz=0, rowptr=None, col=None), x_l=None, x_r=None, att=None,
                 out=None, lse=None)
    assert _call("pygio_gatv2", _gatv2_params("forward", empty)) == (0, "")


@needs_library
def test_gatv2_workspace_sizes():
    """Forward: hub slots only where a row can be split, at most nnz / 257
    and num_rows of them; backward: G [num_rows, heads] (fp32), plus hub
    lists and accumulators where either pass splits rows."""
    assert _gatv2_workspace("forward") == (0, 0)
    status, two = _gatv2_workspace("forward", **GATV2_HUB)
    # counter, 2 hub entries, (m, l) and 4 channels per (chunk, head), 600 // 256 + 2 chunks
    assert status == 0 and two % 16 == 0 and two >= 16 + 2 * 16 + 4 * 2 * (2 + 4) * 4
    assert _gatv2_workspace("forward", **dict(GATV2_HUB, max_hubs=100)) == (0, two)
    status, one = _gatv2_workspace("forward", **dict(GATV2_HUB, max_hubs=1))
    assert status == 0 and 0 < one < two
    assert _gatv2_workspace("forward", **dict(GATV2_HUB, a=dict(nnz=256))) == (0, 0)
    assert _gatv2_workspace("forward", **dict(GATV2_HUB, hub_degree=None)) == (0, 0)
    assert _gatv2_workspace("backward") == (0, 16)  # G: 2 rows x 2 heads
    status, hubs_a = _gatv2_workspace("backward", **GATV2_HUB)
    assert status == 0 and hubs_a >= 16 + 16 + 2 * 2 * 8 * 4 + 2 * 16  # G, counters, A and B
    status, hubs_t = _gatv2_workspace("backward", a=dict(nnz=600), hub_degree_t=_int64_at(16),
                                      max_hubs_t=3)
    assert status == 0 and hubs_t >= 16 + 16 + 2 * 8 * 4 + 2 * 16  # 600 // 257 = 2 slots
    assert _gatv2_workspace("backward", a=dict(num_rows=0, nnz=0)) == (0, 0)
    lib = _native.library()
    for entry, kind in (("pygio_gatv2_workspace_size", "forward"),
                        ("pygio_gatv2_backward_workspace_size", "backward")):
        assert getattr(lib, entry)(ctypes.byref(_gatv2_params(kind, {})),
                                   None) == PYGIO_ERR_INVALID_ARGUMENT
        assert "bytes must not be NULL" in lib.pygio_last_error().decode()
    status, message = _call("pygio_gatv2_backward_workspace_size",
                            _gatv2_params("backward", dict(max_hubs_t=-2)))
    assert status == PYGIO_ERR_INVALID_ARGUMENT
    assert "max_hubs and max_hubs_t must be non-negative" in message


@needs_library
def test_own_gatv2_backward_checks_its_parameters():
    nulls = "lse, grad_out and grad_x_r must not be NULL"
    cases = GATV2_SHARED_CASES + [
        (dict(dropout_p=1.5), "dropout_p must lie in [0, 1)"),
        (dict(a_t=dict(num_rows=2)), "a_t must be the transpose of a"),
        (dict(a_t=dict(num_cols=3)), "a_t must be the transpose of a"),
        (dict(a_t=dict(nnz=5)), "a_t must be the transpose of a"),
        (dict(a_t=dict(index_bits=64)), "a_t must be the transpose of a"),
        (dict(a_t=dict(col=None)), "rowptr / col must not be NULL"),
        (dict(max_hubs=-1), "max_hubs and max_hubs_t must be non-negative"),
        (dict(max_hubs_t=-1), "max_hubs and max_hubs_t must be non-negative"),
        (dict(grad_att=None), "grad_att must not be NULL"),
        (dict(edge=16), "grad_edge must be given exactly when edge is"),
        (dict(grad_edge=16), "grad_edge must be given exactly when edge is"),
        (dict(lse=None), nulls),
        (dict(grad_out=None), nulls),
        (dict(grad_x_r=None), nulls),
        (dict(grad_x_l=None), "grad_x_l, a_t.rowptr and att must not be NULL"),
        (dict(grad_x_r_row_stride=7), "grad_x_r row stride 7 is less than the width 8"),
        (dict(grad_x_l_row_stride=0), "grad_x_l row stride 0 is less than the width 8"),
        (dict(a=dict(nnz=0), a_t=dict(nnz=0, rowptr=None)),
         "grad_x_l, a_t.rowptr and att must not be NULL"),
        (dict(perm_t=None), "perm_t must not be NULL"),
        (dict(workspace=None), "needs a workspace"),
        (dict(workspace=40), "workspace must be 16-byte aligned"),
    ]
    for fields, expected in cases:
        status, message = _call("pygio_gatv2_backward", _gatv2_params("backward", fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith("pygio_gatv2_backward:"), message
    status, message = _call("pygio_gatv2_backward", _gatv2_params(
        "backward", dict(channels=1028, x_l_row_stride=2056, x_r_row_stride=2056,
                         grad_x_l_row_stride=2056, grad_x_r_row_stride=2056)))
    assert status == PYGIO_ERR_UNSUPPORTED and "are not supported" in message, message


@needs_library
def test_own_gatv2_alpha_checks_its_parameters():
    cases = GATV2_SHARED_CASES + [
        (dict(lse=None), "lse and alpha must not be NULL"),
        (dict(alpha=None), "lse and alpha must not be NULL"),
    ]
    for fields, expected in cases:
        status, message = _call("pygio_gatv2_alpha", _gatv2_params("alpha", fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith("pygio_gatv2_alpha:"), message
    # No entries: nothing to write, no device.
    empty = dict(a=dict(nnz=0), x_l=None, lse=None, alpha=None)
    assert _call("pygio_gatv2_alpha", _gatv2_params("alpha", empty)) == (0, "")


@needs_library
def test_spmm_calls_need_a_plan():
    status, message = _call("pygio_spmm_run", _params("pygio_spmm_params"))
    assert status == PYGIO_ERR_INVALID_ARGUMENT and "plan must not be NULL" in message
    _native.library().pygio_spmm_plan_destroy(None)  # a no-op


# ------------------------------------------------------ the wrappers on a GPU
ALG2 = 6  # CUSPARSE_SPMM_CSR_ALG2, the package's default algorithm
# Against a float64 reference: fp32 accumulation, output rounded to dtype.
TOLERANCE = {torch.float64: dict(rtol=1e-10, atol=1e-10),
             torch.float32: dict(rtol=1e-5, atol=1e-5),
             torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _random_csr(rows: int, cols: int, nnz: int, index_dtype: torch.dtype, device):
    """(rowptr, col, row) of a random CSR with duplicates and empty rows."""
    gen = torch.Generator().manual_seed(rows * 1000 + nnz)
    row = torch.randint(0, rows, (nnz,), generator=gen).sort().values
    col = torch.randint(0, cols, (nnz,), generator=gen)
    rowptr = torch.zeros(rows + 1, dtype=torch.int64)
    rowptr[1:] = torch.bincount(row, minlength=rows).cumsum(0)
    return rowptr.to(device, index_dtype), col.to(device, index_dtype), row.to(device)


def _row_strided(rows: int, width: int, dtype: torch.dtype, device, fill=None):
    """A [rows, width] view of a wider tensor (row stride width + 3), random
    or ``fill`` everywhere, the padding included."""
    full = torch.empty(rows, width + 3, dtype=dtype, device=device)
    full.normal_() if fill is None else full.fill_(fill)
    return full[:, :width]


def _padding_untouched(out: torch.Tensor) -> bool:
    """The 3 padding columns beyond each row of a _row_strided NaN tensor."""
    padding = out.as_strided((out.size(0), 3), (out.stride(0), 1), out.size(1))
    return bool(padding.isnan().all())


@pytest.mark.cuda
@needs_library
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_on_row_strided_tensors(index_dtype, dtype, transpose):
    _native.load_cusparse()
    rows, cols, width, device = 37, 29, 13, torch.device("cuda")
    rowptr, col, row = _random_csr(rows, cols, 150, index_dtype, device)
    values = torch.randn(col.numel(), dtype=dtype, device=device)
    dense = torch.zeros(rows, cols, dtype=torch.float64, device=device)
    dense.index_put_((row, col.long()), values.double(), accumulate=True)
    if transpose:
        dense = dense.t()
    nan = float("nan")
    handle = _native.spmm_plan_create(rowptr, col, cols, width, dtype, transpose, ALG2)
    try:  # strided, then contiguous: a new row stride on the same plan
        for x, out in ((_row_strided(dense.size(1), width, dtype, device),
                        _row_strided(dense.size(0), width, dtype, device, fill=nan)),
                       (torch.randn(dense.size(1), width, dtype=dtype, device=device),
                        torch.full((dense.size(0), width), nan, dtype=dtype, device=device))):
            size = _native.spmm_workspace_size(handle, values, x, out)
            workspace = torch.empty(size, dtype=torch.uint8, device=device) if size else None
            _native.spmm_run(handle, values, x, out, workspace)
            torch.testing.assert_close(out.double(), dense @ x.double(), **TOLERANCE[dtype])
            assert out.is_contiguous() or _padding_untouched(out)
    finally:
        _native.spmm_plan_destroy(handle)


@pytest.mark.cuda
@needs_library
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("width", [0, 1, 45])
def test_sddmm_on_row_strided_tensors(index_dtype, dtype, width):
    rows, cols, device = 41, 23, torch.device("cuda")
    rowptr, col, row = _random_csr(rows, cols, 170, index_dtype, device)
    g = _row_strided(rows, width, dtype, device)
    x = _row_strided(cols, width, dtype, device)
    out = torch.full((col.numel(),), float("nan"), dtype=dtype, device=device)
    _native.sddmm(rowptr, col, g, x, out)
    ref = (g.double()[row] * x.double()[col.long()]).sum(-1)
    torch.testing.assert_close(out.double(), ref, **TOLERANCE[dtype])


def _current_context():
    """The CUDA driver's current context on this thread (None: none)."""
    context = ctypes.c_void_p()
    assert ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(context)) == 0
    return context.value


@pytest.mark.cuda
@needs_library
def test_entries_restore_the_callers_context():
    """On the last GPU, from a thread with device 0 current and from a fresh
    thread with no context at all: the context is the caller's afterwards."""
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    rowptr, col, _ = _random_csr(30, 30, 90, torch.int32, device)
    x = torch.randn(30, 8, device=device)
    out = torch.empty(col.numel(), device=device)
    params = _params("pygio_sddmm_params", dtype=_native.DTYPE_CODES[x.dtype],
                     device=device.index, a=_native._csr(rowptr, col, 30), width=8,
                     g=x.data_ptr(), g_row_stride=8, x=x.data_ptr(), x_row_stride=8,
                     out=out.data_ptr(), stream=_native.stream_of(x))
    torch.cuda.set_device(0)
    seen = {}

    def call(key):
        before = _current_context()
        seen[key] = (before, _call("pygio_sddmm", params), _current_context())

    call("torch thread")
    thread = threading.Thread(target=call, args=("fresh thread",))
    thread.start()
    thread.join()
    torch.cuda.synchronize(device)
    assert seen["fresh thread"][0] is None
    for before, result, after in seen.values():
        assert result == (0, "")
        assert after == before
    assert torch.cuda.current_device() == 0
    torch.testing.assert_close(out, (x[torch.repeat_interleave(rowptr.diff().long())]
                                     * x[col.long()]).sum(-1))


@pytest.mark.cuda
@needs_library
def test_spmm_plan_refuses_more_entries_than_rows_times_cols():
    _native.load_cusparse()
    device = torch.device("cuda")
    rowptr = torch.tensor([0, 2, 4], dtype=torch.int32, device=device)
    col = torch.tensor([0, 0, 0, 0], dtype=torch.int32, device=device)
    with pytest.raises(_native.NativeError, match="at most num_rows x num_cols"):
        _native.spmm_plan_create(rowptr, col, 1, 4, torch.float32, False, ALG2)
    handle = _native.spmm_plan_create(rowptr, col, 2, 4, torch.float32, False, ALG2)
    _native.spmm_plan_destroy(handle)  # 4 entries in 2 x 2: accepted


# A graph-transformer call with the sizes of the GATv2 calls above (q, k and v
# 8 wide) and fake aligned pointers: each case breaks one thing.
TRANSFORMER_INPUTS = dict(dtype=0, heads=2, channels=4, q=16, q_row_stride=8, k=16,
                          k_row_stride=8, scale=0.5)


def _transformer_params(kind: str, fields: dict):
    fields = dict(fields)
    a = dict(GATV2_CSR, **fields.pop("a", {}))
    base = dict(TRANSFORMER_INPUTS)
    if kind != "alpha":
        base.update(v=16, v_row_stride=8)
    if kind == "forward":
        base.update(out=16, lse=_float_at(16))
    elif kind == "backward":
        a_t = dict(num_rows=a["num_cols"], num_cols=a["num_rows"], nnz=a["nnz"], rowptr=16,
                   col=16, index_bits=a["index_bits"])
        a_t.update(fields.pop("a_t", {}))
        base.update(a_t=_native.Csr(**a_t), perm_t=16, out=16, lse=_float_at(16), grad_out=16,
                    grad_q=16, grad_q_row_stride=8, grad_k=16, grad_k_row_stride=8, grad_v=16,
                    grad_v_row_stride=8, workspace=16)
    else:
        base.update(lse=_float_at(16), alpha=_float_at(16))
    base.update(fields)
    name = {"forward": "pygio_transformer_params",
            "backward": "pygio_transformer_backward_params",
            "alpha": "pygio_transformer_alpha_params"}[kind]
    return _params(name, a=_native.Csr(**a), **base)


@needs_library
@pytest.mark.parametrize("kind, entry", [("forward", "pygio_transformer"),
                                         ("backward", "pygio_transformer_backward"),
                                         ("alpha", "pygio_transformer_alpha")])
def test_own_transformer_checks_its_parameters(kind, entry):
    """The graph-transformer entries refuse, before touching the device,
    what would make their kernels read or write out of bounds."""
    cases = [
        (dict(dtype=1), "dtype must be float32, float16 or bfloat16, got code 1"),
        (dict(heads=0), "heads and channels must be positive"),
        (dict(scale=float("inf")), "scale must be finite"),
        (dict(scale=float("nan")), "scale must be finite"),
        (dict(a=dict(index_bits=16)), "index_bits must be 32 or 64"),
        (dict(q=None), "must not be NULL"),
        (dict(q_row_stride=7), "q row stride 7 is less than the width 8"),
        (dict(k=None), "must not be NULL"),
        (dict(k_row_stride=3), "k row stride 3 is less than the width 8"),
    ]
    if kind != "alpha":
        cases += [(dict(v=None), "v must not be NULL"),
                  (dict(v_row_stride=2), "v row stride 2 is less than the width 8"),
                  (dict(dropout_p=1.0), "dropout_p must lie in [0, 1)")]
    if kind == "forward":
        cases += [(dict(max_hubs=-1), "max_hubs must be non-negative"),
                  (dict(lse=None), "out and lse must not be NULL"),
                  (GATV2_HUB, "needs a workspace")]
    if kind == "backward":
        cases += [(dict(a_t=dict(nnz=5)), "a_t must be the transpose of a"),
                  (dict(edge=16), "grad_edge must be given exactly when edge is"),
                  (dict(grad_k=None), "must not be NULL"),
                  (dict(grad_q_row_stride=4), "grad_q row stride 4 is less than the width 8"),
                  (dict(grad_k_row_stride=7), "grad_k row stride 7 is less than the width 8"),
                  (dict(grad_v_row_stride=-8), "grad_v row stride -8 is less than the width 8"),
                  (dict(perm_t=None), "perm_t must not be NULL"),
                  (dict(max_hubs_t=-1), "max_hubs and max_hubs_t must be non-negative"),
                  (dict(workspace=None), "needs a workspace"),
                  (dict(workspace=24), "workspace must be 16-byte aligned")]
    if kind == "alpha":
        cases += [(dict(alpha=None), "lse and alpha must not be NULL")]
    for fields, expected in cases:
        status, message = _call(entry, _transformer_params(kind, fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
        assert message.startswith(entry + ":"), message
    # Nothing to do needs no device.
    empty = dict(a=dict(num_rows=0, num_cols=0, nnz=0, rowptr=None, col=None), q=None, k=None)
    if kind == "backward":
        empty["a_t"] = dict(rowptr=None, col=None)
    assert _call(entry, _transformer_params(kind, empty)) == (0, "")


@needs_library
def test_transformer_workspace_sizes():
    """Forward: the hub layout of GATv2's forward; backward: Delta [num_rows, heads]."""
    lib = _native.library()

    def size(kind, entry, **fields):
        out = ctypes.c_size_t(12345)
        status = getattr(lib, entry)(ctypes.byref(_transformer_params(kind, fields)),
                                     ctypes.byref(out))
        return status, out.value

    assert size("forward", "pygio_transformer_workspace_size") == (0, 0)
    status, hubs = size("forward", "pygio_transformer_workspace_size", **GATV2_HUB)
    assert status == 0 and hubs == _gatv2_workspace("forward", **GATV2_HUB)[1]
    assert size("backward", "pygio_transformer_backward_workspace_size") == (0, 16)
    status, both = size("backward", "pygio_transformer_backward_workspace_size",
                        hub_degree=_int64_at(16), max_hubs=2, hub_degree_t=_int64_at(16),
                        max_hubs_t=2, a=dict(nnz=600))
    # Delta, counters, grad_q per hub (2 x 8 floats), grad_k and grad_v per hub, 2 + 2 entries
    assert status == 0 and both >= 16 + 16 + 2 * 8 * 4 + 2 * 2 * 8 * 4 + 4 * 16


@needs_library
def test_graph_build_entries_check_their_parameters():
    """pygio_edge_index_stats and pygio_csr_from_grouped refuse, before
    touching the device, what would make their kernels read or write out of
    bounds."""
    def edges(**fields):
        base = dict(src=16, dst=24, src_stride=1, dst_stride=1, num_edges=4, index_bits=64)
        base.update(fields)
        return _native.Edges(**base)

    stats_cases = [
        (dict(edges=edges(num_edges=0), stats=_int64_at(16)), "num_edges must be positive"),
        (dict(edges=edges(index_bits=16), stats=_int64_at(16)), "index_bits must be 32 or 64"),
        (dict(edges=edges(src=None), stats=_int64_at(16)), "src and dst must not be NULL"),
        (dict(edges=edges(dst_stride=-1), stats=_int64_at(16)), "strides"),
        (dict(edges=edges()), "stats must not be NULL"),
    ]
    csr = dict(edges=edges(), stats=_int64_at(16), out_rowptr=16, out_col=16, out_row=16,
               out_index_bits=32, num_rows=3)
    stats_cases += [  # the CSR written in the same pass
        (dict(csr, out_index_bits=16), "out_index_bits must be 32 or 64"),
        (dict(csr, num_rows=-1), "num_rows must be non-negative"),
        (dict(csr, num_rows=0), "at least one row"),
        (dict(csr, out_row=None), "out_col and out_row must be set together"),
    ]
    for fields, expected in stats_cases:
        status, message = _call("pygio_edge_index_stats",
                                _params("pygio_edge_stats_params", **fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
    outputs = dict(out_rowptr=16, out_col=16, out_row=16, out_index_bits=32, num_rows=3)
    build_cases = [
        (dict(outputs, out_index_bits=16), "out_index_bits must be 32 or 64"),
        (dict(outputs, num_rows=-1), "num_rows must be non-negative"),
        (dict(outputs, num_rows=0), "at least one row"),
        (dict(outputs, out_rowptr=None), "out_rowptr must not be NULL"),
        (dict(outputs, out_col=None, out_row=None), "out_col and out_row must not be NULL"),
        (dict(outputs, out_col=None), "out_col and out_row must be set together"),
    ]
    for fields, expected in build_cases:
        status, message = _call("pygio_csr_from_grouped",
                                _params("pygio_csr_from_grouped_params", edges=edges(),
                                        **fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)


def test_edge_stats_rows_twin_matches_header():
    """_native's twin of PYGIO_EDGE_STATS_ROWS(PYGIO_EDGE_STATS_ITEMS(...)):
    the header's constants, and items counted as the edges, or with the CSR
    outputs max(edges, rows + 1)."""
    defines = dict(re.findall(r"#define (PYGIO_EDGE_STATS\w*) (\d+)", HEADER.read_text()))
    assert int(defines["PYGIO_EDGE_STATS"]) == _native.EDGE_STATS
    assert int(defines["PYGIO_EDGE_STATS_BLOCKS"]) == _native.EDGE_STATS_BLOCKS
    assert int(defines["PYGIO_EDGE_STATS_ITEMS_PER_BLOCK"]) == _native.EDGE_STATS_ITEMS_PER_BLOCK
    per_block = _native.EDGE_STATS_ITEMS_PER_BLOCK
    assert _native.edge_stats_rows(1) == 1
    assert _native.edge_stats_rows(per_block + 1) == 2
    assert _native.edge_stats_rows(2, 2 * per_block) == 3  # 2 * per_block + 1 rowptr items
    assert _native.edge_stats_rows(3 * per_block, 5) == 3
    assert _native.edge_stats_rows(1 << 40) == _native.EDGE_STATS_BLOCKS


@needs_library
@pytest.mark.cuda
def test_edge_stats_rows_must_be_device_or_pinned_memory():
    """pygio_edge_index_stats writes its rows straight into device or pinned
    host memory; pageable host memory, which the kernel cannot reach, is
    refused before any launch."""
    edge_index = torch.tensor([[0, 1], [1, 1]], device="cuda")
    rows = _native.edge_stats_rows(2)  # one: two edges
    pageable = (ctypes.c_int64 * (rows * _native.EDGE_STATS))()
    params = _params("pygio_edge_stats_params", device=0, edges=_native._edges(edge_index),
                     stats=ctypes.cast(pageable, ctypes.POINTER(ctypes.c_int64)),
                     stream=torch.cuda.current_stream().cuda_stream)
    status, message = _call("pygio_edge_index_stats", params)
    assert status == PYGIO_ERR_INVALID_ARGUMENT
    assert "stats must be device memory or pinned host memory" in message
    pinned = torch.full((rows + 1, _native.EDGE_STATS), -1, dtype=torch.int64,
                        pin_memory=True)
    params.stats = ctypes.cast(pinned.data_ptr(), ctypes.POINTER(ctypes.c_int64))
    assert _call("pygio_edge_index_stats", params)[0] == 0
    torch.cuda.synchronize()
    assert pinned[:rows, :-1].amin(0).tolist()[:2] == [0, 1] and pinned[:rows, -1].sum() == 1
    assert (pinned[rows:] == -1).all()  # no row past what the launch writes


@needs_library
def test_csr_transpose_checks_its_parameters():
    """pygio_csr_transpose refuses, before touching the device, what would
    make its kernels or its sort read or write out of bounds; an empty
    matrix needs no workspace (and no device to size one)."""
    csr = dict(num_rows=2, num_cols=3, nnz=4, rowptr=16, col=16, index_bits=32)
    outputs = dict(row=16, out_rowptr=16, out_col=16, out_row=16, out_perm=16, workspace=16)
    cases = [
        (dict(outputs, a=dict(csr, index_bits=16)), "index_bits must be 32 or 64"),
        (dict(outputs, a=dict(csr, nnz=-1)), "non-negative"),
        (dict(outputs, a=dict(csr, col=None)), "must not be NULL"),
        (dict(outputs, a=csr, out_rowptr=None), "out_rowptr must not be NULL"),
        (dict(outputs, a=csr, row=None), "row must not be NULL"),
        (dict(outputs, a=csr, out_perm=None), "out_col, out_row and out_perm"),
        (dict(outputs, a=csr, workspace=None), "workspace must be a 16-byte aligned"),
        (dict(outputs, a=csr, workspace=24), "workspace must be a 16-byte aligned"),
    ]
    for fields, expected in cases:
        fields = dict(fields, a=_native.Csr(**fields["a"]))
        status, message = _call("pygio_csr_transpose",
                                _params("pygio_csr_transpose_params", **fields))
        assert status == PYGIO_ERR_INVALID_ARGUMENT and expected in message, (fields, message)
    empty = _params("pygio_csr_transpose_params",
                    a=_native.Csr(**dict(csr, nnz=0, col=None)), out_rowptr=16)
    size = ctypes.c_size_t(123)
    assert _native.library().pygio_csr_transpose_workspace_size(
        ctypes.byref(empty), ctypes.byref(size)) == 0
    assert size.value == 0
