"""Reference sampling: the exact algorithms the CUDA kernels implement, in plain torch.

This is both the path for CPU tensors and the oracle of the GPU tests, which compare
tokens for equality given the same seed and offset. Every function computes on the device
of its input and returns tensors there (the GPU tests run it on the GPU, where it is fast).
Contracts (see aotinfer.sampling for the public API and the NaN/infinity rules):

Cleaning. A probability takes part only when it is finite and > 0; NaN, +-inf, zero and
negative entries act as probability 0. A logit takes part when it is > -inf (NaN never).

Kept sets, per source row (``probs`` row ``r``, parameters indexed by ``r``):

- top-k: ``t_k`` = the k-th largest positive value (counting repeats); keep ``p >= t_k``
  (ties at the k-th value are all kept). k < 1 or k >= V: no filter.
- top-p: ``t_p`` = the largest value ``t`` with ``mass(p >= t) >= top_p * mass(all)``;
  top_p >= 1 (or NaN, in a per-row tensor) means no filter.
- min-p: keep ``p >= min_p * max(p)`` (float32 product; a product that is not a finite
  positive number keeps everything).
- top-k then top-p: ``M_k = mass(p >= t_k)``, ``t_p`` = the largest ``t`` with
  ``mass(p >= t) >= top_p * M_k``; keep ``p >= max(t_k, t_p)``.
- joint: keep ``p >= max(t_k, t_p)`` with ``t_p`` measured against the full mass.

Masses are sums in float64 (the exact value the kernels approximate); ``top_p`` and
``min_p`` are rounded to float32 first, as the kernels receive them. The kernels sum integer
masses: each probability's 24-bit mantissa shifted by its exponent against the row's largest
(the draw's unit below), exact down to ``S - 24`` binades below the largest, with a goal of
``ceil(top_p * total)``; they agree with these float64 sums except where a running sum ties
the goal, and for a threshold more than ``S - 24`` binades below the largest, where the
kernels may keep the whole quarter binade (one level-0 histogram bin) that holds it.

Drawing from probabilities: an inverse CDF in fixed point, one 64-bit uniform per output
row. Every kept weight ``w_i`` becomes the integer ``q_i = floor(w_i * 2^(S - e))``, where
``S = 63 - bitlength(V)`` and ``e`` is the unit's exponent: exact shifts of the 24-bit
mantissas, so that every ``q_i`` stays below ``2^S`` and the row total ``T = sum q_i``
below ``2^63``. The unit (``draw_unit_keys``) is
- for a row with **no filter in effect** (plain sampling; top-k with ``k <= 0`` or ``k >=
  V``; top-p with ``top_p >= 1`` or NaN; both at once) whose largest weight lies in
  ``[2^-(S - 25), 2)``: the fixed unit of a largest weight just below 2, ``e = 1``, ``q_i =
  floor(w_i * 2^(S - 1))``. It does not depend on the row, so the kernels sum the masses in
  the same pass that finds the row's largest (one pass over the row, not two); the
  largest's mass, at least ``2^24``, keeps its whole mantissa, and a weight below
  ``2^-(S - 1)`` (about ``2.8e-14`` at V = 128256) rounds to 0 and is never drawn;
- otherwise (a filter in effect, min-p always, or an unnormalised or nearly empty row): the
  unit of the row's largest kept weight ``m``, ``2^(e-1) <= m < 2^e`` (e from m's float32
  bits, subnormals included), so ``q_max`` lies in ``[2^(S-1), 2^S)``; a weight below ``m *
  2^-S`` (about ``m * 1.4e-14`` at V = 128256) rounds to 0.
Either way the rounding moves a token's probability by at most ``2^-(S-24)`` of its own
size or ``2^-(S-1)`` absolutely. With ``R`` the 64-bit word ``(w0 << 32) | w1`` of Philox
group 0 of the output row (stream 0), the target is ``t = floor(R * T / 2^64)`` and the token
is the first index whose inclusive prefix sum of ``q`` exceeds ``t`` (so ``q_token > 0``).
Integer sums do not depend on their order, so the reference, the one-CTA-per-row kernel and
the cluster kernel (each CTA summing its own slice) all pick the same token for the same
uniform, and a filter that filters nothing draws the plain token. (Until session 64 every
row took its own largest's unit, so the plain draw read the row twice. The two units give
the same token except where the target falls within the rounding of a prefix sum or a weight
below ``2^-(S - 24)`` loses low bits: rare, but a seed may now draw another token.)
The top-p sampler draws by rejection instead (``top_p_rejection``, at every shape since
session 41; the threshold's inverse CDF where ``top_p_draw="threshold"`` or
AOTINFER_SAMPLING_TOP_P=threshold asks for it): rounds of this draw among the keys above a
floor, in ``rejection_mass``'s masses (the fixed unit for every row whose largest lies in
the range above), which keeps the top-p set in those masses but picks a different token for
the same words; a row without a filter draws this plain token.
Sampling from logits is Gumbel-max: with ``E_i = -log1p(-u_i)`` (``philox.exponential``,
``u_i`` element ``i`` of stream 0 of the output row), the token maximises
``x_i - log(E_i)`` (float32) over logits > -inf; ties go to the lowest index. A row with
nothing to draw gives token 0 and ``valid = False``, and so does an output row whose index
lies outside ``[0, U)``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Optional, Tuple, Union

import torch

from . import philox
from .philox import MASK64

Scalar = Union[int, float]
ParamLike = Union[torch.Tensor, Scalar]

# The values of sample_from_probs' top_p_draw (and of AOTINFER_SAMPLING_TOP_P): "auto" is
# "rejection" at every shape, the kernels' rule (top_p_draws_by_rejection in
# providers/csrc/sampling/sample_launch.cu, with the measurements). Before session 41 batches
# above 64 output rows of rows of at least 65536 drew by the threshold.
TOP_P_DRAWS = ("auto", "rejection", "threshold")

# Elements per chunk of output rows, so that drawing many samples from few rows (indices)
# never materialises a huge (batch, vocab) tensor.
_CHUNK_ELEMENTS = 1 << 22


class FilterMode(IntEnum):
    """Which tokens survive; the values are providers/csrc/sampling/sampling_launchers.h's."""

    NONE = 0
    TOP_K = 1
    TOP_P = 2
    MIN_P = 3
    TOP_K_THEN_TOP_P = 4
    JOINT = 5


def softmax(
    logits: torch.Tensor,
    temperature: Optional[Union[torch.Tensor, float]] = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """softmax(logits / temperature) over the last dimension, returned as float32.

    ``temperature`` is None (1.0), a float, or a (B,) tensor with one value per row. A row
    holding a NaN, or only -inf, comes out NaN, like ``torch.softmax``.
    """
    x = logits.to(compute_dtype)
    if isinstance(temperature, torch.Tensor):
        x = x / temperature.to(device=x.device, dtype=compute_dtype).unsqueeze(-1)
    elif temperature is not None:
        x = x / float(temperature)
    return torch.softmax(x, dim=-1).to(torch.float32)


# ----------------------------------------------------------------------------------------
# Kept sets


def clean_probs(probs: torch.Tensor) -> torch.Tensor:
    """float32 copy where NaN, +-inf and entries <= 0 are 0."""
    p = probs.to(torch.float32)
    return torch.where(torch.isfinite(p) & (p > 0), p, torch.zeros((), dtype=p.dtype))


def _per_row(value: ParamLike, rows: int, dtype: torch.dtype, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device, dtype=dtype).reshape(-1).expand(rows)
    return torch.full((rows,), value, dtype=dtype, device=device)


def _top_k_rows(
    top_k: ParamLike, rows: int, vocab: int, device
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(k per row int64, whether it filters: 1 <= k < V; k < 1 or k >= V keeps every entry)."""
    k = _per_row(top_k, rows, torch.int64, device)
    return k, (k >= 1) & (k < vocab)


def _top_p_rows(top_p: ParamLike, rows: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """(top_p per row float32, whether it filters: top_p < 1; 1 or more, or NaN, keeps all)."""
    p32 = _per_row(top_p, rows, torch.float32, device)
    return p32, p32 < 1  # NaN < 1 is False: no filter


def _top_k_threshold(sorted_desc: torch.Tensor, top_k: ParamLike) -> torch.Tensor:
    """t_k per row from descending-sorted clean probs; 0 (keep every positive) when the
    row has no top-k filter or fewer than k positive entries."""
    rows, vocab = sorted_desc.shape
    k, active = _top_k_rows(top_k, rows, vocab, sorted_desc.device)
    pos = (k.clamp(1, vocab) - 1).unsqueeze(1)
    t = sorted_desc.gather(1, pos).squeeze(1)
    return torch.where(active, t, torch.zeros_like(t))


def _top_p_threshold(
    sorted_desc: torch.Tensor, top_p: ParamLike, base_mass: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """t_p per row: the largest value t with mass(p >= t) >= top_p * base_mass; 0 (no
    filter) where top_p >= 1 or is NaN.

    ``base_mass`` defaults to the row's full mass. The first descending position whose
    running sum reaches the target holds t_p: a larger value's whole tie group ends before
    that position, so its mass falls short. A per-row top_p <= 0 keeps the largest value
    (and its ties).
    """
    rows = sorted_desc.size(0)
    csum = sorted_desc.to(torch.float64).cumsum(dim=1)
    total = csum[:, -1] if base_mass is None else base_mass
    p32, active = _top_p_rows(top_p, rows, sorted_desc.device)
    target = p32.clamp(min=0).to(torch.float64) * total
    first = (csum < target.unsqueeze(1)).sum(dim=1).clamp(max=sorted_desc.size(1) - 1)
    t = sorted_desc.gather(1, first.unsqueeze(1)).squeeze(1)
    return torch.where(active, t, torch.zeros_like(t))


def kept_mask(
    probs: torch.Tensor,
    filter_mode: int = FilterMode.NONE,
    top_k: ParamLike = 0,
    top_p: ParamLike = 1.0,
    min_p: ParamLike = 0.0,
) -> torch.Tensor:
    """Bool ``(U, V)``: which entries of each row take part after the filter.

    ``top_k``/``top_p``/``min_p`` are scalars or ``(U,)`` tensors (one per row of probs).
    """
    p = clean_probs(probs.detach())
    mode = FilterMode(int(filter_mode))
    positive = p > 0
    if mode == FilterMode.NONE:
        return positive
    if mode == FilterMode.MIN_P:
        mp = _per_row(min_p, p.size(0), torch.float32, p.device)
        t = mp * p.max(dim=1).values  # float32 product, like the kernel
        # A threshold that is not a finite positive number (per-row min_p <= 0 or NaN, or
        # an underflow) keeps every positive entry.
        t = torch.where(torch.isfinite(t) & (t > 0), t, torch.zeros_like(t))
        return positive & (p >= t.unsqueeze(1))
    sorted_desc = p.sort(dim=1, descending=True).values
    if mode == FilterMode.TOP_K:
        t = _top_k_threshold(sorted_desc, top_k)
    elif mode == FilterMode.TOP_P:
        t = _top_p_threshold(sorted_desc, top_p)
    elif mode == FilterMode.JOINT:
        t = torch.maximum(
            _top_k_threshold(sorted_desc, top_k), _top_p_threshold(sorted_desc, top_p)
        )
    else:  # TOP_K_THEN_TOP_P
        t_k = _top_k_threshold(sorted_desc, top_k)
        in_k = p >= t_k.unsqueeze(1)
        mass_k = torch.where(in_k, p, 0).to(torch.float64).sum(dim=1)
        t = torch.maximum(t_k, _top_p_threshold(sorted_desc, top_p, mass_k))
    return positive & (p >= t.unsqueeze(1))


# ----------------------------------------------------------------------------------------
# Drawing


def _mass_bits(vocab: int) -> int:
    """S = 63 - bitlength(V): the bit length of a row's largest mass (the kernels' mass_bits)."""
    return 63 - max(vocab, 1).bit_length()


def _weight_keys(w: torch.Tensor) -> torch.Tensor:
    """The float32 bits of cleaned weights as int64 (non-negative: no sign bit)."""
    return w.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def fixed_point_mass(
    weights: torch.Tensor, unit_key: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``q`` (int64, same shape) of cleaned and filtered float32 weights ``(R, V)``; see
    "Drawing" above. Entries that are 0 give 0; a row of zeros is all 0. ``unit_key``
    ``(R, 1)`` (int64 float32 bits): the key whose unit each row takes in place of its own
    largest (``draw_unit_keys``)."""
    w = weights.to(torch.float32).contiguous()
    s = _mass_bits(w.size(1))
    bits = _weight_keys(w)
    biased = bits >> 23
    mant = torch.where(biased > 0, (bits & 0x7FFFFF) | 0x800000, bits & 0x7FFFFF)
    # float order = bit order for w >= 0
    top = bits.max(dim=1, keepdim=True).values if unit_key is None else unit_key
    top_biased = top >> 23
    top_mant = torch.where(top_biased > 0, (top & 0x7FFFFF) | 0x800000, top & 0x7FFFFF)
    powers = 2 ** torch.arange(24, dtype=torch.int64, device=w.device)
    top_len = (top_mant >= powers).sum(dim=1, keepdim=True)  # bit length of the mantissa
    shift = biased.clamp(min=1) - top_biased.clamp(min=1) + s - top_len  # <= s - top_len
    return torch.where(shift >= 0, mant << shift.clamp(min=0), mant >> (-shift).clamp(max=63))


REJECTION_UNIT_KEY = 0x3FFFFFFF  # the largest float32 below 2


def draw_unit_keys(weights: torch.Tensor, fixed_rows: torch.Tensor) -> torch.Tensor:
    """The key ``(R, 1)`` (int64 float32 bits) whose unit each row's draw takes (see
    "Drawing" above): ``REJECTION_UNIT_KEY`` for a row of ``fixed_rows`` ``(R,)`` bool whose
    largest weight lies in ``[2^-(S - 25), 2)``, else the row's own largest."""
    s = _mass_bits(weights.size(1))
    own = _weight_keys(weights).max(dim=1, keepdim=True).values
    fixed = fixed_rows.unsqueeze(1) & (own >= (152 - s) << 23) & (own <= REJECTION_UNIT_KEY)
    return torch.where(fixed, REJECTION_UNIT_KEY, own)


def inverse_cdf(
    weights: torch.Tensor, words: torch.Tensor, unfiltered: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fixed-point inverse CDF over ``weights`` ``(R, V)`` (cleaned and filtered, float32)
    with ``words`` ``(R, 2)``, the first two Philox words of each output row; the rows of
    ``unfiltered`` ``(R,)`` bool (None: none) had no filter in effect and take the fixed unit
    where it holds (``draw_unit_keys``). Returns (token int64, valid bool), token 0 for a
    row with no positive weight."""
    w = weights.to(torch.float32).contiguous()
    q = fixed_point_mass(w, None if unfiltered is None else draw_unit_keys(w, unfiltered))
    prefix = q.cumsum(dim=1)
    totals = prefix[:, -1].tolist() if q.size(1) else [0] * q.size(0)
    r = ((words[:, 0] << 32) | words[:, 1]).tolist()  # the int64 view of a 64-bit word
    target = [((ri & MASK64) * t) >> 64 for ri, t in zip(r, totals)]
    t = torch.tensor(target, dtype=torch.int64, device=q.device).unsqueeze(1)
    valid = torch.tensor([x > 0 for x in totals], dtype=torch.bool, device=q.device)
    token = torch.searchsorted(prefix, t, right=True).squeeze(1) if q.size(1) else t.squeeze(1)
    return torch.where(valid, token, torch.zeros_like(token)), valid


def rejection_mass(weights: torch.Tensor) -> torch.Tensor:
    """The masses of ``top_p_rejection`` for cleaned float32 weights ``(R, V)``: the fixed
    unit ``q = floor(w * 2^(S - 1))`` for every row whose largest weight lies in ``[2^-(S -
    25), 2)``, filtered or not, so that the kernels sum round 0's masses in the pass that
    finds the row's largest; other rows (unnormalised above 2, nearly empty) take
    ``fixed_point_mass``'s unit of their own largest. A row without a filter thus draws the
    plain token (``inverse_cdf`` of an unfiltered row)."""
    w = weights.to(torch.float32).contiguous()
    everywhere = torch.ones(w.size(0), dtype=torch.bool, device=w.device)
    return fixed_point_mass(w, draw_unit_keys(w, everywhere))


def unfiltered_rows(
    filter_mode: int, top_k: ParamLike, top_p: ParamLike, rows: int, vocab: int, device
) -> torch.Tensor:
    """``(rows,)`` bool: the rows with no filter in effect, as the kernels decide it from the
    parameters alone (prob_filter's use_k / use_p): plain sampling; top-k with ``k <= 0`` or
    ``k >= V``; top-p (the threshold draw) with ``top_p >= 1`` or NaN; top-k then top-p and
    joint with both. Min-p always filters (its keys at or above min_p times the largest)."""
    mode = FilterMode(int(filter_mode))
    if mode == FilterMode.NONE:
        return torch.ones(rows, dtype=torch.bool, device=device)
    if mode == FilterMode.MIN_P:
        return torch.zeros(rows, dtype=torch.bool, device=device)
    no_k = ~_top_k_rows(top_k, rows, vocab, device)[1]
    no_p = ~_top_p_rows(top_p, rows, device)[1]
    if mode == FilterMode.TOP_K:
        return no_k
    if mode == FilterMode.TOP_P:
        return no_p
    return no_k & no_p


def mass_goal(top_p: float, total: int) -> int:
    """``max(1, ceil(top_p * total))`` exactly, ``top_p`` a float32 value of at most 1 (<= 0
    or NaN: 1), as the kernels' ``mass_goal`` (fixed_point.cuh) computes it."""
    if not top_p > 0:
        return 1
    num, den = float(top_p).as_integer_ratio()
    return max(1, -(-num * total // den))


def top_p_rejection(
    weights: torch.Tensor, top_p: torch.Tensor, word_pairs
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-p sampling by rejection over cleaned float32 ``weights`` ``(R, V)`` (no filter
    applied) with a float32 ``top_p`` ``(R,)``; ``word_pairs(n)`` gives each row's first
    ``2 n`` Philox words ``(R, 2 n)``. Returns (token int64, valid bool).

    With ``q`` the fixed-point masses of the whole row (``rejection_mass``), ``T``
    their total and the goal ``G = max(1, ceil(top_p * T))`` (``top_p >= 1`` or NaN: ``G =
    T``, which accepts the first draw), a token of key ``k`` (its float32 bits) is kept
    when the mass of the keys above it is below ``G``: exactly the top-p set of the
    threshold search, in these masses. Rounds ``r = 0, 1, ...`` with a floor key ``low``
    (at first 0: every participant) and a value ``high`` (at first the row's largest):
    round ``r`` draws by the inverse CDF over the keys above ``low`` with the 64-bit word
    ``(w[2r] << 32) | w[2r + 1]`` (round 0 is the plain draw's word); with ``v0`` the drawn
    value and ``v1 = (v0 + high) * 0.5`` (float32), it accepts when ``mass(key > v0) <
    G``; else, when ``mass(key > v1) < G``, ``low, high = key(v0), v1``, otherwise ``low =
    key(v1)``. Every key at or below ``low`` is outside the top-p set and every key above
    ``high`` inside it, so the accepted token follows the renormalised top-p distribution
    (FlashInfer's dual-pivot rejection, in integers); each round excludes the drawn key
    and halves ``high - low``, so the rounds end. About one row in ten takes a second
    round at top_p 0.9 (dev/top_p_rejection_rounds.py).
    """
    rows = weights.size(0)
    device = weights.device
    w = weights.to(torch.float32).contiguous()
    # NaN and top_p > 1 (no filter) become 1, whose goal is the total (as in the kernels).
    p_row = torch.where(top_p < 1, top_p, torch.ones_like(top_p))
    q = rejection_mass(w)
    keys = _weight_keys(w)
    totals = q.sum(dim=1).tolist()
    p = p_row.tolist()
    goals = [mass_goal(pi, t) for pi, t in zip(p, totals)]
    goal = torch.tensor(goals, dtype=torch.int64, device=device)
    valid = torch.tensor([t > 0 for t in totals], dtype=torch.bool, device=device)
    token = torch.zeros(rows, dtype=torch.int64, device=device)
    low = torch.zeros(rows, dtype=torch.int64, device=device)
    high = w.max(dim=1).values if w.size(1) else torch.zeros(rows, device=device)
    active = valid.clone()
    rounds = 0
    while bool(active.any()):
        words = word_pairs(rounds + 1)[:, 2 * rounds : 2 * rounds + 2]
        live = active.nonzero().squeeze(1)
        qr = torch.where(keys[live] > low[live].unsqueeze(1), q[live], 0)
        prefix = qr.cumsum(dim=1)
        r = ((words[live, 0] << 32) | words[live, 1]).tolist()
        target = [((ri & MASK64) * t) >> 64 for ri, t in zip(r, prefix[:, -1].tolist())]
        t = torch.tensor(target, dtype=torch.int64, device=device).unsqueeze(1)
        drawn = torch.searchsorted(prefix, t, right=True)
        k0 = keys[live].gather(1, drawn)
        v1 = ((w[live].gather(1, drawn).squeeze(1) + high[live]) * 0.5).to(torch.float32)
        k1 = v1.view(torch.int32).to(torch.int64).unsqueeze(1)
        above0 = torch.where(keys[live] > k0, q[live], 0).sum(dim=1)
        above1 = torch.where(keys[live] > k1, q[live], 0).sum(dim=1)
        accept = above0 < goal[live]
        token[live] = torch.where(accept, drawn.squeeze(1), token[live])
        narrow = ~accept & (above1 < goal[live])
        low[live] = torch.where(
            narrow, k0.squeeze(1), torch.where(accept, low[live], k1.squeeze(1))
        )
        high[live] = torch.where(narrow, v1, high[live])
        active[live] = ~accept
        rounds += 1
    return token, valid


def race(weights: torch.Tensor, u: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exponential race (chain speculative sampling's token draw): argmin of E_i / w_i over
    entries with w_i > 0 (weights already cleaned and filtered, float32). Returns (token
    int64, valid bool), token 0 for a row with no positive weight. Ties, including ratios
    that overflow to inf, go to the lowest index among the candidates."""
    candidate = weights > 0
    ratio = philox.exponential(u) / weights  # inf or nan where w == 0: masked next
    ratio = torch.where(candidate, ratio, float("inf"))
    token = ratio.argmin(dim=1)
    valid = candidate.any(dim=1)
    missed = valid & ~candidate.gather(1, token.unsqueeze(1)).squeeze(1)
    token = torch.where(missed, candidate.to(torch.int8).argmax(dim=1), token)
    return torch.where(valid, token, torch.zeros_like(token)), valid


def gumbel_max(logits: torch.Tensor, u: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gumbel-max: argmax of x_i - log(E_i) (float32) over x_i > -inf (NaN never).
    Returns (token int64, valid bool), token 0 for a row with no candidate."""
    x = logits.to(torch.float32)
    candidate = x > float("-inf")
    score = x - torch.log(philox.exponential(u))
    score = torch.where(candidate, score, float("-inf"))
    token = score.argmax(dim=1)
    valid = candidate.any(dim=1)
    # E = inf (u = 1) gives a candidate the score -inf; it still beats every non-candidate.
    missed = valid & ~candidate.gather(1, token.unsqueeze(1)).squeeze(1)
    token = torch.where(missed, candidate.to(torch.int8).argmax(dim=1), token)
    return torch.where(valid, token, torch.zeros_like(token)), valid


def _source_rows(indices: Optional[torch.Tensor], rows: int, device) -> torch.Tensor:
    """Source row of each output row; -1 for an index outside [0, rows) (the kernels give
    such a row token 0 and valid False rather than read out of bounds)."""
    if indices is None:
        return torch.arange(rows, dtype=torch.int64, device=device)
    idx = indices.detach().to(device=device, dtype=torch.int64)
    return torch.where((idx >= 0) & (idx < rows), idx, -1)


def _draw(
    table: torch.Tensor,
    indices: Optional[torch.Tensor],
    seed,
    offset,
    drawer,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Runs ``drawer(rows_of_table, seeds, offsets, output_rows, source_rows)`` over output
    rows in chunks (the drawer takes its Philox numbers from stream 0 of each output row)."""
    device = table.device
    src = _source_rows(indices, table.size(0), device)
    batch, vocab = src.numel(), table.size(1)
    seeds = philox.row_keys(seed, batch, device)
    offsets = philox.row_keys(offset, batch, device)
    tokens = torch.zeros(batch, dtype=torch.int64, device=device)
    valid = torch.zeros(batch, dtype=torch.bool, device=device)
    step = max(1, _CHUNK_ELEMENTS // max(vocab, 1))
    for lo in range(0, batch, step):
        hi = min(batch, lo + step)
        rows = torch.arange(lo, hi, dtype=torch.int64, device=device)
        src_chunk = src[lo:hi]
        source = src_chunk.clamp(min=0)
        tok, ok = drawer(table[source], seeds[lo:hi], offsets[lo:hi], rows, source)
        in_range = src_chunk >= 0
        tokens[lo:hi] = torch.where(in_range, tok, 0)
        valid[lo:hi] = ok & in_range
    return tokens, valid


def sample_from_probs(
    probs: torch.Tensor,
    indices: Optional[torch.Tensor] = None,
    filter_mode: int = FilterMode.NONE,
    top_k: ParamLike = 0,
    top_p: ParamLike = 1.0,
    min_p: ParamLike = 0.0,
    *,
    seed,
    offset,
    top_p_draw: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per output row from ``probs`` ``(U, V)`` after the filter, by the
    fixed-point inverse CDF.

    ``indices`` ``(B,)`` picks the source row of each output row (identity when None);
    ``seed``/``offset`` are ints or int64/uint64 tensors of length 1 or B (per output row).
    ``top_p_draw`` (top-p mode only): ``"threshold"``, the inverse CDF over the kept set;
    ``"rejection"`` and ``"auto"`` (the kernels' rule at every shape; AOTINFER_SAMPLING_TOP_P
    pins one there), ``top_p_rejection``.
    Returns ``(tokens int64 (B,), valid bool (B,))``.
    """
    probs = probs.detach()
    if top_p_draw not in TOP_P_DRAWS:
        raise ValueError(f"top_p_draw must be auto, rejection or threshold, got {top_p_draw!r}")
    by_rejection = top_p_draw != "threshold"
    if FilterMode(int(filter_mode)) == FilterMode.TOP_P and by_rejection:
        p32 = _per_row(top_p, probs.size(0), torch.float32, probs.device)

        def rejection_drawer(table, seeds, offsets, rows, source):
            def word_pairs(n):
                return philox.random_words(seeds, offsets, rows, 0, 2 * n)

            return top_p_rejection(table, p32[source], word_pairs)

        return _draw(clean_probs(probs), indices, seed, offset, rejection_drawer)
    weights = torch.where(kept_mask(probs, filter_mode, top_k, top_p, min_p), clean_probs(probs), 0)
    plain = unfiltered_rows(filter_mode, top_k, top_p, *probs.shape, probs.device)

    def drawer(table, seeds, offsets, rows, source):
        words = philox.random_words(seeds, offsets, rows, 0, 2)
        return inverse_cdf(table, words, plain[source])

    return _draw(weights, indices, seed, offset, drawer)


def sample_from_logits(
    logits: torch.Tensor, indices: Optional[torch.Tensor] = None, *, seed, offset
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per output row from ``logits`` ``(U, V)`` by Gumbel-max (no filter).
    Returns ``(tokens int64 (B,), valid bool (B,))``; valid is False for a row whose logits
    are all -inf or NaN."""

    def drawer(table, seeds, offsets, rows, _source):
        return gumbel_max(table, philox.uniform(seeds, offsets, rows, 0, table.size(1)))

    return _draw(logits.detach().to(torch.float32), indices, seed, offset, drawer)


# ----------------------------------------------------------------------------------------
# Renormalisation and masking


def renorm_probs(
    probs: torch.Tensor,
    filter_mode: int,
    top_k: ParamLike = 0,
    top_p: ParamLike = 1.0,
) -> torch.Tensor:
    """``kept ? p / mass(kept) : 0`` per row, in the dtype of ``probs`` (computed in
    float64, rounded once). A row with nothing kept is all zero."""
    p = clean_probs(probs.detach())
    kept = kept_mask(p, filter_mode, top_k, top_p)
    p64 = torch.where(kept, p, 0).to(torch.float64)
    mass = p64.sum(dim=1, keepdim=True)
    out = torch.where(mass > 0, p64 / mass.clamp(min=torch.finfo(torch.float64).tiny), 0)
    return out.to(torch.float32).to(probs.dtype)


def top_k_mask_logits(logits: torch.Tensor, top_k: ParamLike) -> torch.Tensor:
    """Logits with everything outside the top-k set -inf, same dtype.

    Kept: entries >= the k-th largest non-NaN value (ties kept). NaN is never kept, so it
    becomes -inf even without a filter (k < 1 or k >= V), and a row with fewer than k
    non-NaN entries keeps all of them.
    """
    logits = logits.detach()
    x = logits.to(torch.float32)  # exact for float16/bfloat16
    rows, vocab = x.shape
    finite_or_inf = torch.where(torch.isnan(x), float("-inf"), x)
    sorted_desc = finite_or_inf.sort(dim=1, descending=True).values
    k = _per_row(top_k, rows, torch.int64, x.device)
    active = (k >= 1) & (k < vocab)
    t = sorted_desc.gather(1, (k.clamp(1, vocab) - 1).unsqueeze(1)).squeeze(1)
    t = torch.where(active, t, torch.full_like(t, float("-inf")))
    keep = ~torch.isnan(x) & (x >= t.unsqueeze(1))
    return torch.where(keep, logits, float("-inf"))


# ----------------------------------------------------------------------------------------
# Chain speculative sampling


def chain_speculative_sampling(
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    seed,
    offset,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chain speculative sampling for ``B`` requests with ``n`` draft tokens each.

    Position ``j`` accepts draft token ``t`` when ``u_j * q < p`` (float32), with
    ``q = draft_probs[b, j, t]``, ``p = target_probs[b, j, t]`` (cleaned) and ``u_j`` element
    ``j`` of stream 1 of row ``b``; a token id outside ``[0, V)`` is rejected. At the first
    rejection ``j*`` the output token is drawn by the race from ``relu(target - draft)`` at
    ``j*`` in stream ``2 + j*`` (from ``target[b, j*]`` itself, same uniforms, when that
    residual has no positive entry); when all ``n`` pass, the bonus token is drawn from
    ``target[b, n]`` in stream ``2 + n``. A distribution with nothing to draw gives token 0.

    Returns ``(output_token_ids int32 (B, n+1), accepted int32 (B,), emitted int32 (B,))``:
    ids after the drawn token are -1; ``accepted`` counts the positions that pass on their
    own, ``emitted`` those before the first rejection. Not accumulated (the caller adds).
    """
    draft = draft_probs.detach()
    device = draft.device
    target = target_probs.detach().to(device)
    ids = draft_token_ids.detach().to(device=device, dtype=torch.int64)
    batch, n, vocab = draft.shape
    seeds = philox.row_keys(seed, batch, device)
    offsets = philox.row_keys(offset, batch, device)
    rows = torch.arange(batch, dtype=torch.int64, device=device)

    in_range = (ids >= 0) & (ids < vocab)
    safe = ids.clamp(0, vocab - 1).unsqueeze(-1)
    q = clean_probs(draft.gather(2, safe).squeeze(-1))
    p = clean_probs(target[:, :n].gather(2, safe).squeeze(-1))
    u_acc = philox.uniform(seeds, offsets, rows, 1, n)
    accept = in_range & (u_acc * q < p)
    accepted = accept.sum(dim=1)
    emitted = accept.to(torch.int64).cumprod(dim=1).sum(dim=1)  # positions before j*

    # The distribution of the token at position emitted[b]: residual or bonus.
    at = emitted.view(batch, 1, 1).expand(batch, 1, vocab)
    t_row = clean_probs(target.gather(1, at).squeeze(1))
    d_row = clean_probs(draft.gather(1, at.clamp(max=max(n - 1, 0))).squeeze(1)) if n else t_row
    rejected = (emitted < n).unsqueeze(1)
    residual = torch.where(rejected, torch.relu(t_row - d_row), t_row)
    u = philox.uniform(seeds, offsets, rows, 2 + emitted, vocab)
    token, has_residual = race(residual, u)
    fallback, _ = race(t_row, u)
    token = torch.where(has_residual, token, fallback)

    pos = torch.arange(n + 1, dtype=torch.int64, device=device).unsqueeze(0)
    drafts = torch.cat([ids, torch.zeros(batch, 1, dtype=torch.int64, device=device)], dim=1)
    out = torch.where(pos < emitted.unsqueeze(1), drafts, torch.full_like(drafts, -1))
    out = torch.where(pos == emitted.unsqueeze(1), token.unsqueeze(1), out)
    return out.to(torch.int32), accepted.to(torch.int32), emitted.to(torch.int32)
