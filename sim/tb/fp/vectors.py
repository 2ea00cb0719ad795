"""Operands, directed corner cases and bit-exact numpy references for the FP units.

Every unit in `sim/rtl/fp/` is described once in `UNITS`; the cocotb test and the pytest
wrapper both read it. Values are handled as raw bit patterns (uint32 for fp32, uint16 for
bf16/fp16 inputs and bf16 outputs, uint64 for fp64) so nothing is rounded on the way to the simulator.
References use numpy float32 arithmetic, which is IEEE-754 round-to-nearest-even with
subnormals on x86 (numpy never enables flush-to-zero); bf16 rounding is exact bit arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UnitSpec:
    """Port shape of one FP unit (mirrors the Verilog; LATENCY is cross-checked by the test)."""

    name: str
    operands: int  # 1 (in_a only) or 2 (in_a, in_b)
    in_bits: int  # width of in_a / in_b
    out_bits: int  # width of out_y
    has_sub: bool  # fp32_add's in_sub port
    latency: int | None  # mirror of the Verilog `localparam LATENCY` (checked); None: use the elaborated one


UNITS: dict[str, UnitSpec] = {
    "fp32_add": UnitSpec("fp32_add", 2, 32, 32, True, 6),
    "fp32_mul": UnitSpec("fp32_mul", 2, 32, 32, False, 5),
    "fp32_div": UnitSpec("fp32_div", 2, 32, 32, False, None),
    "fp32_sqrt": UnitSpec("fp32_sqrt", 1, 32, 32, False, None),
    "bf16_to_fp32": UnitSpec("bf16_to_fp32", 1, 16, 32, False, 1),
    "fp16_to_fp32": UnitSpec("fp16_to_fp32", 1, 16, 32, False, 1),
    "fp32_to_bf16": UnitSpec("fp32_to_bf16", 1, 32, 16, False, 1),
    "fp64_add": UnitSpec("fp64_add", 2, 64, 64, True, 6),
    "fp32_sq_f64": UnitSpec("fp32_sq_f64", 1, 32, 64, False, 4),
}

# Named fp32 patterns, one or more from every class.
POS_ZERO = 0x00000000
NEG_ZERO = 0x80000000
MIN_SUBNORMAL = 0x00000001
MAX_SUBNORMAL = 0x007FFFFF
MIN_NORMAL = 0x00800000
ONE = 0x3F800000
MAX_FINITE = 0x7F7FFFFF
POS_INF = 0x7F800000
NEG_INF = 0xFF800000
QNAN = 0x7FC00000
SNAN = 0x7F800001

CLASS_VALUES = np.array(
    [
        POS_ZERO,
        MIN_SUBNORMAL,
        0x00000002,
        0x00000003,
        0x00400000,  # half the smallest normal
        0x00400001,
        MAX_SUBNORMAL,
        0x007FFFFE,
        MIN_NORMAL,
        0x00800001,
        0x00FFFFFF,
        0x01000000,
        0x0C000000,  # 2^-103: products/quotients land near the subnormal range
        0x33800000,  # 2^-24: half an ulp of 1
        0x33800001,
        0x34000000,  # 2^-23: an ulp of 1
        0x3F7FFFFF,  # just below 1
        ONE,
        0x3F800001,  # just above 1
        0x3FC00000,  # 1.5
        0x3FFFFFFF,
        0x40000000,  # 2
        0x40400000,  # 3
        0x4B000000,  # 2^23
        0x4B7FFFFF,
        0x5F800000,  # 2^64
        0x7E800000,  # 2^126
        0x7F000000,  # 2^127
        0x7F7FFFFE,
        MAX_FINITE,
        POS_INF,
        QNAN,
        0x7FC00001,  # quiet NaN with payload
        0x7FFFFFFF,
        SNAN,  # signalling NaN with payload 1
        0x7FA00000,
        0x7FBFFFFF,
    ],
    dtype=np.uint32,
)


# --------------------------------------------------------------------------- helpers
def _u32(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.uint64).astype(np.uint32)


def _f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def fp32_is_nan(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint32)
    return ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)


def bf16_is_nan(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint32)
    return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)


def _compose(rng: np.random.Generator, exps: np.ndarray, mants: np.ndarray | None = None) -> np.ndarray:
    """fp32 patterns with random signs, the given biased exponents (clipped) and mantissas."""
    n = len(exps)
    if mants is None:
        mants = _mantissas(rng, n)
    signs = rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    exps = np.clip(exps, 0, 255).astype(np.uint32)
    # infinities are chosen on purpose elsewhere; exponent 255 here means "largest finite"
    mants = np.where(exps == 255, np.uint32(0x7FFFFF), mants).astype(np.uint32)
    exps = np.where(exps == 255, np.uint32(254), exps)
    return (signs | (exps << np.uint32(23)) | (mants & np.uint32(0x7FFFFF))).astype(np.uint32)


def _mantissas(rng: np.random.Generator, n: int) -> np.ndarray:
    """Mantissas that hit rounding corners: random, all ones, zero, few bits (exact ties)."""
    kind = rng.integers(0, 6, n)
    rand = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    few = rand & np.uint32(0x7FF000)  # short mantissas make exact products and ties likely
    ones_low = np.uint32(0x7FFFFF) ^ (rand & np.uint32(0xF))
    out = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3],
        [np.uint32(0x7FFFFF), np.uint32(0), few, ones_low],
        default=rand,
    )
    return out.astype(np.uint32)


def _class_pick(rng: np.random.Generator, n: int) -> np.ndarray:
    signs = rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    return (CLASS_VALUES[rng.integers(0, len(CLASS_VALUES), n)] | signs).astype(np.uint32)


def _exp_of(bits: np.ndarray) -> np.ndarray:
    return ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)


# --------------------------------------------------------------------------- random operands
def random_operands(unit: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """`n` operand sets for `unit`: keys "a" (and "b", "sub" where the unit has them)."""
    spec = UNITS[unit]
    rng = np.random.default_rng([seed, sum(map(ord, unit))])
    if unit == "fp64_add":
        return _fp64_add_operands(rng, n)
    if spec.in_bits == 16:
        return {"a": rng.integers(0, 1 << 16, n, dtype=np.uint32)}

    # a: a third uniform patterns, a third class values, a third mixed-exponent values
    sel = rng.integers(0, 3, n)
    a = np.select(
        [sel == 0, sel == 1],
        [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32), _class_pick(rng, n)],
        default=_compose(rng, rng.integers(0, 256, n)),
    ).astype(np.uint32)
    if unit == "fp32_to_bf16":
        return {"a": _bf16_round_operands(rng, a)}
    if unit == "fp32_sqrt":
        return {"a": _sqrt_operands(rng, a)}
    if unit == "fp32_sq_f64":
        return {"a": a}

    ea = np.maximum(_exp_of(a), 1)
    uniform_b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    if unit == "fp32_add":
        # b close in exponent to a: cancellation, alignment sticky bits, ties, carries
        diff = np.where(rng.integers(0, 4, n) == 0, rng.integers(0, 40, n), rng.integers(0, 4, n))
        eb = ea - diff * rng.choice([1, -1], n)
        near = _compose(rng, eb)
        # a itself with a few low bits flipped: massive cancellation
        flip = (a ^ rng.integers(0, 16, n, dtype=np.uint32)) ^ (rng.integers(0, 2, n, dtype=np.uint32) << 31)
        # half / one-and-a-half ulp of a: exact ties and their neighbours
        tie = _compose(rng, ea - 24, rng.choice(np.array([0, 0x400000, 1, 0x7FFFFF], dtype=np.uint32), n))
        choice = rng.integers(0, 6, n)
        b = np.select(
            [choice == 0, choice == 1, choice == 2, choice == 3],
            [uniform_b, _class_pick(rng, n), flip, tie],
            default=near,
        )
        return {"a": a, "b": b.astype(np.uint32), "sub": rng.integers(0, 2, n, dtype=np.uint32)}

    # mul/div: aim the result exponent at the subnormal boundary, overflow, or anywhere
    target = np.select(
        [sel == 0, sel == 1],
        [rng.integers(-26, 4, n), rng.integers(250, 258, n)],
        default=rng.integers(1, 255, n),
    )
    eb = (target - ea + 127) if unit == "fp32_mul" else (ea - target + 127)
    aimed = _compose(rng, eb)
    choice = rng.integers(0, 5, n)
    b = np.select([choice == 0, choice == 1], [uniform_b, _class_pick(rng, n)], default=aimed)
    return {"a": a, "b": b.astype(np.uint32)}


def _bf16_round_operands(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """Half of the patterns get low halves at the rounding corners (ties, just off ties)."""
    n = len(a)
    lows = np.array([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF, 0x0001], dtype=np.uint32)
    low = lows[rng.integers(0, len(lows), n)]
    corner = (a & np.uint32(0xFFFF0000)) | low
    return np.where(rng.integers(0, 2, n) == 0, a, corner).astype(np.uint32)


def _sqrt_operands(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """Mostly non-negative operands, plus exact squares (results with no rounding)."""
    n = len(a)
    y = _compose(rng, rng.integers(64, 190, n), rng.integers(0, 1 << 23, n, dtype=np.uint32) & 0x7FF000)
    with np.errstate(all="ignore"):
        squares = _bits(_f32(y) * _f32(y)) & np.uint32(0x7FFFFFFF)
    pos = a & np.uint32(0x7FFFFFFF)
    kind = rng.integers(0, 8, n)
    return np.select([kind == 0, kind == 1], [a, squares], default=pos).astype(np.uint32)


# --------------------------------------------------------------------------- directed cases
def _pairs(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    a, b = zip(*pairs, strict=True)
    return _u32(a), _u32(b)


def directed_operands(unit: str) -> dict[str, np.ndarray]:
    """Hand-picked corner cases for `unit` (exhaustive for the 16-bit-input conversions)."""
    spec = UNITS[unit]
    if unit == "fp64_add":
        return _fp64_add_directed()
    if spec.in_bits == 16:
        return {"a": np.arange(1 << 16, dtype=np.uint32)}

    # every pair of class values, both signs, covers the special-case tables of two-operand units
    cls = np.concatenate([CLASS_VALUES, CLASS_VALUES | np.uint32(0x80000000)])
    if unit == "fp32_sq_f64":
        # every class value, and every subnormal's leading-one position
        low = np.uint32(1) << np.arange(23, dtype=np.uint32)
        return {"a": np.concatenate([cls, low, low | np.uint32(0x80000000), low - np.uint32(1)]).astype(np.uint32)}
    cross_a = np.repeat(cls, len(cls))
    cross_b = np.tile(cls, len(cls))

    if unit == "fp32_add":
        a, b = _pairs(
            [
                (ONE, 0x33800000),  # 1 + 2^-24: tie, rounds to even (1)
                (0x3F800001, 0x33800000),  # tie, rounds up to even
                (ONE, 0x33800001),  # just above the tie
                (0x3FFFFFFF, 0x34000000),  # carry out of rounding into the exponent
                (0x3F7FFFFF, 0x33000000),  # 1 - 2^-24 + 2^-25: tie below a binade boundary
                (MAX_FINITE, 0x73000000),  # max + half ulp: tie rounds to even -> inf
                (MAX_FINITE, 0x72FFFFFF),  # just under the tie: stays max
                (MAX_FINITE, MAX_FINITE),  # overflow
                (MIN_NORMAL, 0x80000001),  # normal - subnormal -> largest subnormal
                (MAX_SUBNORMAL, MIN_SUBNORMAL),  # subnormal + subnormal -> smallest normal
                (MAX_SUBNORMAL, MAX_SUBNORMAL),
                (0x00800001, 0x80800000),  # cancellation down to the smallest subnormal
                (0x4B000001, 0xCB000000),  # cancellation to 1
                (0x3F800001, 0xBF800000),  # 1.0000001 - 1
                (ONE, 0xBF7FFFFF),  # 1 - (1 - ulp): 2^-24 exactly
                (0x4C000000, 0x3F800000),  # far apart: b only sticky
                (0x4C000000, 0xBF800000),  # far apart subtract: borrow through sticky
                (0x4B800000, 0xBF800001),
                (POS_INF, NEG_INF),  # inf - inf: NaN
                (POS_INF, POS_INF),
                (NEG_INF, NEG_INF),
                (NEG_ZERO, NEG_ZERO),  # -0 + -0 = -0
                (POS_ZERO, NEG_ZERO),  # +0
                (QNAN, POS_INF),
                (SNAN, ONE),
            ]
        )
        # x - x = +0 for every class value (and x + (-x))
        same = cls
        return {
            "a": np.concatenate([a, a, cross_a, cross_a, same, same]),
            "b": np.concatenate([b, b, cross_b, cross_b, same, same ^ np.uint32(0x80000000)]),
            "sub": np.concatenate(
                [
                    np.zeros(len(a), np.uint32),
                    np.ones(len(a), np.uint32),
                    np.zeros(len(cross_a), np.uint32),
                    np.ones(len(cross_a), np.uint32),
                    np.ones(len(same), np.uint32),
                    np.zeros(len(same), np.uint32),
                ]
            ),
        }

    if unit == "fp32_mul":
        a, b = _pairs(
            [
                (0x3F800001, 0x3F800001),  # (1+u)^2: tie-free rounding
                (0x3FFFFFFF, 0x3FFFFFFF),  # rounding carry-out into the exponent
                (0x3F7FFFFF, 0x3F800001),
                (MIN_NORMAL, 0x3F000000),  # smallest normal / 2 -> subnormal, exact
                (MIN_NORMAL, 0x3F7FFFFF),  # just below the normal boundary: rounds back up
                (0x00800001, 0x3F000000),  # half of an odd value: tie in the subnormal range
                (0x00800003, 0x3F000000),
                (MIN_SUBNORMAL, 0x3F000000),  # 2^-150: tie to even -> 0
                (MIN_SUBNORMAL, 0x3F000001),  # just above: rounds to the smallest subnormal
                (MIN_SUBNORMAL, 0x3FC00000),  # 1.5 * min subnormal -> 2 * min
                (MIN_SUBNORMAL, 0x4B000000),  # subnormal input normalised, normal result
                (MAX_SUBNORMAL, 0x40000000),  # subnormal * 2 -> normal
                (MIN_SUBNORMAL, MIN_SUBNORMAL),  # underflow to 0
                (MAX_FINITE, 0x3F800001),  # overflow
                (MAX_FINITE, 0x3F7FFFFF),
                (0x7F000000, 0x40000000),  # exactly 2^128: overflow
                (0x1F800000, 0x1F800000),  # 2^-64 * 2^-64 = 2^-128: subnormal
                (POS_INF, POS_ZERO),  # inf * 0: NaN
                (NEG_ZERO, POS_INF),
                (NEG_ZERO, ONE),
                (NEG_ZERO, NEG_ZERO),
                (SNAN, POS_ZERO),
            ]
        )
        return {"a": np.concatenate([a, b, cross_a]), "b": np.concatenate([b, a, cross_b])}

    if unit == "fp32_div":
        a, b = _pairs(
            [
                (POS_ZERO, POS_ZERO),  # 0/0: NaN
                (NEG_ZERO, POS_ZERO),
                (ONE, POS_ZERO),  # x/0: +inf
                (ONE, NEG_ZERO),  # -inf
                (0xBF800000, POS_ZERO),
                (MIN_SUBNORMAL, POS_ZERO),
                (POS_INF, POS_INF),  # inf/inf: NaN
                (POS_INF, ONE),
                (ONE, POS_INF),  # signed zero
                (0xBF800000, POS_INF),
                (ONE, 0x40400000),  # 1/3: inexact, round down
                (0x40000000, 0x40400000),  # 2/3: round up
                (ONE, 0x3F7FFFFF),  # just above 1
                (0x3F7FFFFF, ONE),
                (MIN_NORMAL, 0x40000000),  # halve into subnormal
                (MIN_SUBNORMAL, 0x40000000),  # 2^-150: tie to even -> 0
                (0x00000003, 0x40000000),  # 1.5 min subnormal: tie rounds to even (2)
                (MIN_SUBNORMAL, 0x3F000000),  # subnormal / 0.5
                (MAX_SUBNORMAL, 0x3F000000),  # crosses into normal
                (MIN_SUBNORMAL, MAX_FINITE),  # underflow to 0
                (MAX_FINITE, 0x3F000000),  # overflow
                (MAX_FINITE, MIN_SUBNORMAL),
                (MAX_FINITE, MAX_FINITE),
                (MIN_SUBNORMAL, MIN_SUBNORMAL),
                (QNAN, POS_ZERO),
                (SNAN, ONE),
            ]
        )
        return {"a": np.concatenate([a, b, cross_a]), "b": np.concatenate([b, a, cross_b])}

    if unit == "fp32_sqrt":
        a = _u32(
            [
                POS_ZERO,
                NEG_ZERO,  # sqrt(-0) = -0
                POS_INF,
                NEG_INF,  # NaN
                0xBF800000,  # sqrt(-1): NaN
                0x80000001,  # negative subnormal: NaN
                QNAN,
                SNAN,
                0xFFC00000,
                ONE,
                0x40800000,  # 4 -> 2 exactly
                0x40000000,  # sqrt(2)
                0x40400000,
                MIN_SUBNORMAL,  # 2^-149: odd exponent
                0x00000002,
                0x00000004,  # 2^-147 -> ...
                MAX_SUBNORMAL,
                MIN_NORMAL,
                MAX_FINITE,
                0x3F7FFFFF,
                0x3F800001,
            ]
        )
        return {"a": np.concatenate([a, cls])}

    if unit == "fp32_to_bf16":
        a = _u32(
            [
                0x3F808000,  # tie, kept LSB even: round down
                0x3F818000,  # tie, kept LSB odd: round up
                0x3F808001,  # just above the tie
                0x3F807FFF,  # just below
                0x3FFF8000,  # tie rounding carries into the exponent
                0x7F7F8000,  # tie at the top: rounds up to the even... inf
                0x7F7F7FFF,  # stays at the largest bf16
                MAX_FINITE,  # rounds to inf
                0x7F800001,  # NaN with payload only in the low half: must stay NaN
                0xFF800001,
                QNAN,
                POS_INF,
                NEG_INF,
                0x00008000,  # subnormal tie down to 0
                0x00018000,  # subnormal tie up
                0x007F8000,  # largest bf16 subnormal rounds up to the smallest normal
                0x80008001,
                NEG_ZERO,
            ]
        )
        return {"a": np.concatenate([a, cls, cls | np.uint32(0x80000000)])}

    raise KeyError(unit)


# --------------------------------------------------------------------------- fp64 (the sum of squares)
F64_ONE = 0x3FF0000000000000
F64_MAX_FINITE = 0x7FEFFFFFFFFFFFFF
F64_MIN_NORMAL = 0x0010000000000000
F64_MAX_SUBNORMAL = 0x000FFFFFFFFFFFFF
F64_POS_INF = 0x7FF0000000000000
F64_QNAN = 0x7FF8000000000000
F64_SIGN = 0x8000000000000000

F64_CLASS_VALUES = np.array(
    [
        0, 1, 2, 3, 0x0008000000000000, 0x0008000000000001, F64_MAX_SUBNORMAL, 0x000FFFFFFFFFFFFE,
        F64_MIN_NORMAL, 0x0010000000000001, 0x001FFFFFFFFFFFFF, 0x0020000000000000,
        0x3CA0000000000000,  # 2^-53: half an ulp of 1
        0x3CA0000000000001, 0x3CB0000000000000, 0x3FEFFFFFFFFFFFFF, F64_ONE, 0x3FF0000000000001,
        0x3FF8000000000000, 0x3FFFFFFFFFFFFFFF, 0x4000000000000000, 0x4330000000000000,
        0x47EFFFFFE0000000,  # the largest fp32, squared below
        0x4FEFFFFFC0000020,  # (largest fp32)^2: the largest square the ring sums
        0x7FE0000000000000, 0x7FEFFFFFFFFFFFFE, F64_MAX_FINITE, F64_POS_INF, F64_QNAN,
        0x7FF8000000000001, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000001, 0x7FF4000000000000,
    ],
    dtype=np.uint64,
)


def _f64(bits: object) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint64).view(np.float64)


def fp64_is_nan(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint64)
    return ((bits & np.uint64(0x7FF0000000000000)) == np.uint64(0x7FF0000000000000)) & (
        (bits & np.uint64(0x000FFFFFFFFFFFFF)) != 0
    )


def _u64_random(rng: np.random.Generator, n: int) -> np.ndarray:
    high = rng.integers(0, 1 << 32, n, dtype=np.uint64) << np.uint64(32)
    return high | rng.integers(0, 1 << 32, n, dtype=np.uint64)


def _compose64(rng: np.random.Generator, exps: np.ndarray, mants: np.ndarray | None = None) -> np.ndarray:
    """fp64 patterns with random signs, the given biased exponents (clipped to finite) and mantissas."""
    n = len(exps)
    frac_mask = np.uint64((1 << 52) - 1)
    if mants is None:
        rand = _u64_random(rng, n) & frac_mask
        kind = rng.integers(0, 6, n)
        mants = np.select(
            [kind == 0, kind == 1, kind == 2, kind == 3],
            [frac_mask, np.uint64(0), rand & np.uint64(0xFFFFFF0000000), frac_mask ^ (rand & np.uint64(0xF))],
            default=rand,
        ).astype(np.uint64)
    signs = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63)
    exps = np.clip(exps, 0, 2046).astype(np.uint64)
    return (signs | (exps << np.uint64(52)) | (np.asarray(mants, dtype=np.uint64) & frac_mask)).astype(np.uint64)


def fp32_squares(rng: np.random.Generator, n: int) -> np.ndarray:
    """fp64 patterns of squared fp32 values (exact in fp64), as the ring's sum of squares adds them."""
    sel = rng.integers(0, 3, n)
    x = np.select(
        [sel == 0, sel == 1],
        [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32), _class_pick(rng, n)],
        default=_compose(rng, rng.integers(0, 256, n)),
    ).astype(np.uint32)
    with np.errstate(all="ignore"):
        wide = _f32(x).astype(np.float64)
        return (wide * wide).view(np.uint64)


def _fp64_add_operands(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    def class_pick() -> np.ndarray:
        return F64_CLASS_VALUES[rng.integers(0, len(F64_CLASS_VALUES), n)] | (
            rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63))

    sel = rng.integers(0, 4, n)
    a = np.select(
        [sel == 0, sel == 1, sel == 2],
        [_u64_random(rng, n), class_pick(), fp32_squares(rng, n)],
        default=_compose64(rng, rng.integers(0, 2047, n)),
    ).astype(np.uint64)
    ea = np.maximum(((a >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64), 1)
    diff = np.where(rng.integers(0, 4, n) == 0, rng.integers(0, 70, n), rng.integers(0, 4, n))
    near = _compose64(rng, ea - diff * rng.choice([1, -1], n))
    flip = (a ^ rng.integers(0, 16, n, dtype=np.uint64)) ^ (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63))
    tie_mants = np.array([0, 1 << 51, 1, (1 << 52) - 1], dtype=np.uint64)
    tie = _compose64(rng, ea - 53, tie_mants[rng.integers(0, 4, n)])
    choice = rng.integers(0, 7, n)
    b = np.select(
        [choice == 0, choice == 1, choice == 2, choice == 3, choice == 4],
        [_u64_random(rng, n), class_pick(), flip, tie, fp32_squares(rng, n)],
        default=near,
    ).astype(np.uint64)
    return {"a": a, "b": b, "sub": rng.integers(0, 2, n, dtype=np.uint64)}


def _fp64_add_directed() -> dict[str, np.ndarray]:
    cls = np.concatenate([F64_CLASS_VALUES, F64_CLASS_VALUES | np.uint64(F64_SIGN)])
    pairs = [
        (F64_ONE, 0x3CA0000000000000),  # 1 + 2^-53: tie, rounds to even (1)
        (0x3FF0000000000001, 0x3CA0000000000000),  # tie, rounds up to even
        (F64_ONE, 0x3CA0000000000001),  # just above the tie
        (0x3FFFFFFFFFFFFFFF, 0x3CB0000000000000),  # rounding carry into the exponent
        (F64_MAX_FINITE, 0x7C90000000000000),  # max + half ulp: tie to even -> inf
        (F64_MAX_FINITE, 0x7C8FFFFFFFFFFFFF),  # just under the tie: stays max
        (F64_MAX_FINITE, F64_MAX_FINITE),  # overflow
        (F64_MIN_NORMAL, F64_SIGN | 1),  # normal - subnormal -> largest subnormal
        (F64_MAX_SUBNORMAL, 1),  # subnormal + subnormal -> smallest normal
        (F64_MAX_SUBNORMAL, F64_MAX_SUBNORMAL),
        (0x0010000000000001, F64_SIGN | F64_MIN_NORMAL),  # cancellation to the smallest subnormal
        (0x4330000000000001, F64_SIGN | 0x4330000000000000),  # cancellation to 1
        (F64_POS_INF, F64_SIGN | F64_POS_INF),  # inf - inf -> NaN
    ]
    pa, pb = zip(*pairs, strict=True)
    a = np.concatenate([np.repeat(cls, len(cls)), np.array(pa, dtype=np.uint64)])
    b = np.concatenate([np.tile(cls, len(cls)), np.array(pb, dtype=np.uint64)])
    sub = np.concatenate([np.zeros(len(cls) ** 2, dtype=np.uint64), np.zeros(len(pairs), dtype=np.uint64)])
    # the class cross product once more as subtractions
    return {"a": np.concatenate([a, a[: len(cls) ** 2]]), "b": np.concatenate([b, b[: len(cls) ** 2]]),
            "sub": np.concatenate([sub, np.ones(len(cls) ** 2, dtype=np.uint64)])}


# --------------------------------------------------------------------------- references
def fp32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even fp32 -> bf16 on bit patterns; NaN -> 0x7FC0."""
    a = np.asarray(a, dtype=np.uint32)
    lsb = (a >> np.uint32(16)) & np.uint32(1)
    # uint64 so the rounding add of the largest NaN patterns does not wrap
    rounded = ((a.astype(np.uint64) + 0x7FFF + lsb) >> np.uint64(16)).astype(np.uint32)
    return np.where(fp32_is_nan(a), np.uint32(0x7FC0), rounded & np.uint32(0xFFFF)).astype(np.uint32)


def reference(unit: str, ops: dict[str, np.ndarray]) -> np.ndarray:
    """Expected out_y bit patterns (uint32; uint64 for fp64) for operand sets `ops` of `unit`."""
    if unit == "fp64_add":
        a64, b64 = _f64(ops["a"]), _f64(ops["b"])
        sub = np.asarray(ops["sub"]).astype(bool)
        with np.errstate(all="ignore"):
            return np.where(sub, a64 - b64, a64 + b64).view(np.uint64)
    a = np.asarray(ops["a"], dtype=np.uint32)
    with np.errstate(all="ignore"):
        if unit == "fp32_sq_f64":
            wide = _f32(a).astype(np.float64)
            return (wide * wide).view(np.uint64)
        if unit == "fp32_add":
            b = _f32(ops["b"])
            sub = np.asarray(ops["sub"]).astype(bool)
            return np.where(sub, _bits(_f32(a) - b), _bits(_f32(a) + b)).astype(np.uint32)
        if unit == "fp32_mul":
            return _bits(_f32(a) * _f32(ops["b"])).astype(np.uint32)
        if unit == "fp32_div":
            return _bits(_f32(a) / _f32(ops["b"])).astype(np.uint32)
        if unit == "fp32_sqrt":
            return _bits(np.sqrt(_f32(a))).astype(np.uint32)
        if unit == "bf16_to_fp32":
            return (a & np.uint32(0xFFFF)) << np.uint32(16)
        if unit == "fp16_to_fp32":
            return _bits((a & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32))
        if unit == "fp32_to_bf16":
            return fp32_to_bf16_bits(a)
    raise KeyError(unit)


def matches(unit: str, got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Element-wise: bit-exact, or both NaN (any payload)."""
    if UNITS[unit].out_bits == 64:
        got64, exp64 = np.asarray(got, dtype=np.uint64), np.asarray(expected, dtype=np.uint64)
        return (got64 == exp64) | (fp64_is_nan(got64) & fp64_is_nan(exp64))
    got = np.asarray(got, dtype=np.uint32)
    expected = np.asarray(expected, dtype=np.uint32)
    is_nan = bf16_is_nan if UNITS[unit].out_bits == 16 else fp32_is_nan
    return (got == expected) | (is_nan(got) & is_nan(expected))


def all_operands(unit: str, n_random: int, seed: int, directed: bool = True) -> dict[str, np.ndarray]:
    """Directed cases (optional) followed by `n_random` random operand sets."""
    parts = ([directed_operands(unit)] if directed else []) + [random_operands(unit, n_random, seed)]
    keys = parts[0].keys()
    dtype = np.uint64 if UNITS[unit].in_bits == 64 else np.uint32
    return {k: np.concatenate([p[k] for p in parts]).astype(dtype) for k in keys}
