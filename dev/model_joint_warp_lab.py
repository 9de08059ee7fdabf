"""A lane-level Python model of lab AOTINFER_LAB_JOINT_WARP (providers/csrc/sampling/
top_k_set_in_warp.cuh, then cluster_local_top_k.cuh's two_search_draw_in_warp), checked on this
CPU before any GPU could run it (dev/NOTES.md item 77). Adopted in session 47 for top-k then
top-p only (top_k_then_top_p_draw_in_warp, item 79); the model keeps joint's branch too.

1. check_warp_steps: the warp's copy of the set (ballots), its rank sort, the running exact
   masses, the key reaching a goal and the draw, against direct definitions;
2. main: the lab's verdict against two_search_list_filter's radix searches (modelled with
   their per-bin floors, early exits and joint's bounds on the row total) on random lists
   and rows: wherever the lab settles a row, the same kept set and the same token.

A model, not the kernel: the GPU tests (tests/gpu/test_sampling.py, under the lab's wheel)
are the check that counts.

    python3 dev/model_joint_warp_lab.py [TRIALS [SEED]]

The bounds' slack is r * 2^JOINT_SLACK_EXP (default -20, kRowSumSlack in
cluster_local_top_k.cuh since session 57; -36 before, when the slices summed every key in
double). JOINT_SUM_ERROR_EXP=-21 puts the slices' sum off by up to 2^-21 of itself (the trips'
float sums); then every kept set must also equal the one the exact row sum gives (with the
slack of 2^-36).
"""

import math
import os
import random
import struct
import sys

SLACK_EXP = float(os.environ.get("JOINT_SLACK_EXP", "-20"))
SUM_ERROR_EXP = os.environ.get("JOINT_SUM_ERROR_EXP")


def key_of(f):
    return struct.unpack("<I", struct.pack("<f", f))[0] if (f > 0 and f != float("inf")) else 0


def mantissa(k):
    frac = k & 0x7FFFFF
    return frac | 0x800000 if k >> 23 else frac


def bexp(k):
    e = k >> 23
    return e if e > 0 else 1


def mass_bits(n):
    return 63 - n.bit_length()


def exact_mass(k, base):
    if k == 0:
        return 0
    s = bexp(k) + base
    assert s >= 0
    return mantissa(k) << s


def fx_of(max_key, n):
    m = mantissa(max_key)
    ln = m.bit_length()
    return mass_bits(n) - ln - bexp(max_key)


def fx_mass(k, fbase):
    s = bexp(k) + fbase
    m = mantissa(k)
    return m << s if s >= 0 else m >> -s


def popc(x):
    return bin(x).count("1")


def warp_copy_set(keys, positions, floor, entries):
    """Steps of 128 entries, four a lane (entries 4 lane .. 4 lane + 3), four ballots a step."""
    size = 0
    ws_keys = [None] * 64
    ws_pos = [None] * 64
    for first in range(0, entries, 128):
        k = [[key_of(keys[first + 4 * lane + j]) for j in range(4)] for lane in range(32)]
        ins = [sum(1 << lane for lane in range(32) if k[lane][j] >= floor) for j in range(4)]
        for lane in range(32):
            before = (1 << lane) - 1
            at = size + sum(popc(ins[j] & before) for j in range(4))
            for j in range(4):
                if k[lane][j] < floor:
                    continue
                if at < 64:
                    ws_keys[at] = k[lane][j]
                    ws_pos[at] = positions[first + 4 * lane + j]
                at += 1
        size += sum(popc(b) for b in ins)
    return size, ws_keys, ws_pos


def warp_sort_set(ws_keys, size, base):
    a = [ws_keys[lane] if lane < size else 0 for lane in range(32)]
    b = [ws_keys[lane + 32] if lane + 32 < size else 0 for lane in range(32)]
    pa = [0] * 32
    pb = [0] * 32
    for j in range(size):
        other = (a if j < 32 else b)[j & 31]
        for lane in range(32):
            pa[lane] += 1 if (other > a[lane] or (other == a[lane] and j < lane)) else 0
            pb[lane] += 1 if (other > b[lane] or (other == b[lane] and j < lane + 32)) else 0
    sorted_ = [0xDEADBEEF] * 64
    for lane in range(32):
        if lane < size:
            sorted_[pa[lane]] = a[lane]
        if lane + 32 < size:
            sorted_[pb[lane]] = b[lane]
    cum = [0] * 64
    incl = 0
    for lane in range(32):
        s0 = sorted_[2 * lane] if 2 * lane < size else 0
        s1 = sorted_[2 * lane + 1] if 2 * lane + 1 < size else 0
        q0, q1 = exact_mass(s0, base), exact_mass(s1, base)
        incl += q0 + q1
        cum[2 * lane] = incl - q1
        cum[2 * lane + 1] = incl
    return sorted_, cum, incl


def warp_key_reaching(sorted_, cum, goal):
    holder = next(lane for lane in range(32) if cum[2 * lane + 1] >= goal)
    return sorted_[2 * holder + (0 if cum[2 * holder] >= goal else 1)]


def warp_draw(ws_keys, ws_pos, size, min_key, max_key, n, word):
    fb = fx_of(max_key, n)

    def mass(i):
        k = ws_keys[i] if i < size else 0
        return fx_mass(k, fb) if (k != 0 and k >= min_key) else 0

    q0 = [mass(2 * lane) for lane in range(32)]
    own = [q0[lane] + mass(2 * lane + 1) for lane in range(32)]
    incl = []
    acc = 0
    for o in own:
        acc += o
        incl.append(acc)
    total = incl[-1]
    if total == 0:
        return -1
    target = (word * total) >> 64
    holder = next(lane for lane in range(32) if incl[lane] > target)
    rest = target - (incl[holder] - own[holder])
    return ws_pos[2 * holder + (0 if rest < q0[holder] else 1)]


# direct definitions
def direct_key_reaching(setkeys, base, goal):
    for v in sorted(set(setkeys), reverse=True):
        if sum(exact_mass(k, base) for k in setkeys if k >= v) >= goal:
            return v
    raise AssertionError


def direct_draw(list_keys, list_pos, min_key, n, word):
    ks = [key_of(f) for f in list_keys]
    mx = max(ks)
    fb = fx_of(mx, n)
    q = [fx_mass(k, fb) if (k and k >= min_key) else 0 for k in ks]
    total = sum(q)
    if total == 0:
        return -1
    t = (word * total) >> 64
    acc = 0
    for i, qi in enumerate(q):
        acc += qi
        if acc > t:
            return list_pos[i]


def check_warp_steps():
    """The warp steps against direct definitions (sorted sets, the list's inverse CDF)."""
    rng = random.Random(7)
    n = 32000
    checked = draws = 0
    for _ in range(4000):
        entries = rng.choice([512, 1024, 2048])
        # a list: regions of keys, many zeros, ties sometimes
        pool = [
            rng.choice([rng.random(), rng.random() * 1e-3, rng.random() * 1e-6])
            for _ in range(rng.randint(1, 120))
        ]
        if rng.random() < 0.3:
            pool += [pool[0]] * rng.randint(1, 10)
        keys = [0.0] * entries
        idx = rng.sample(range(entries), min(len(pool), entries))
        for i, v in zip(idx, pool):
            keys[i] = v
        positions = list(range(entries))
        rng.shuffle(positions)
        nz = sorted((key_of(v) for v in keys if key_of(v)), reverse=True)
        k = rng.randint(1, 64)
        floor = max(nz[k - 1] if k <= len(nz) else 0, 1)
        size, wk, wp = warp_copy_set(keys, positions, floor, entries)
        expect = [(key_of(v), p) for v, p in zip(keys, positions) if key_of(v) >= floor]
        if size > 64:
            assert len(expect) > 64
            continue
        assert size == len(expect) and list(zip(wk[:size], wp[:size])) == expect
        mx = max(wk[:size])
        base = mass_bits(n) - 24 - (mx >> 23 if mx >> 23 else 1)
        smallest = min(wk[:size])
        if bexp(smallest) + base < 0:
            continue
        sorted_, cum, total = warp_sort_set(wk, size, base)
        assert sorted_[:size] == sorted(wk[:size], reverse=True)
        for _ in range(5):
            goal = rng.randint(1, total)
            assert warp_key_reaching(sorted_, cum, goal) == direct_key_reaching(
                wk[:size], base, goal
            )
            checked += 1
        for _ in range(5):
            min_key = rng.choice(wk[:size])
            word = rng.getrandbits(64)
            assert warp_draw(wk, wp, size, min_key, mx, n, word) == direct_draw(
                keys, positions, min_key, n, word
            )
            draws += 1
    print("goals checked", checked, "draws checked", draws)


KBINS = 2048
SHIFT = (21, 10, 0)
BINS = (2048, 2048, 1024)


def shifted(s, sh):
    return s << sh if sh >= 0 else (s >> -sh if sh > -64 else 0)


def mass_goal(p, base):
    if not p > 0:
        return 1
    num, den = float(p).as_integer_ratio()
    return max(1, -(-num * base // den))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def radix(keys, n, by_mass, count=0, p=0.0, mass_base=0, track=False):
    """radix_threshold over a list scope: dict(key, count_ge, mass_ge, mass_base, top_bin,
    mass_above, whole)."""
    masses = by_mass or track
    parts = [k for k in keys if k]
    prefix = mask = 0
    above_c = above_m = bin_c = bin_m = 0
    goal = count
    top_bin = base = 0
    whole = False
    for level in range(3):
        sh, nb = SHIFT[level], BINS[level]
        cnt = [0] * nb
        msum = [0] * nb
        for k in parts:
            if (k & mask) == prefix:
                d = (k >> sh) & (nb - 1)
                cnt[d] += 1
                msum[d] += mantissa(k)
        if level == 0:
            top_bin = max(k >> 21 for k in parts) + 1 if parts else 0
            tf = (top_bin - 1) >> 2 if top_bin else 0
            base = mass_bits(n) - 24 - (tf if tf > 0 else 1)

        # A bin's mass: its mantissa sum shifted once by its exponent field (floored as a whole).
        fields = [(b >> 2) if level == 0 else (prefix >> 23) for b in range(nb)]
        bin_mass = [shifted(msum[b], max(fields[b], 1) + base) if masses else 0 for b in range(nb)]

        if level == 0:
            all_c = sum(cnt)
            all_m = sum(bin_mass)
            if by_mass:
                goal = mass_goal(p, mass_base if mass_base else all_m)
            if (all_m if by_mass else all_c) < goal:
                return dict(
                    key=0,
                    count_ge=all_c,
                    mass_ge=all_m,
                    mass_base=base,
                    top_bin=top_bin,
                    mass_above=0,
                    whole=False,
                )
        run_c, run_m = above_c, above_m
        found = None
        for b in range(nb - 1, -1, -1):
            c, m = cnt[b], bin_mass[b]
            if (run_m + m if by_mass else run_c + c) >= goal:
                found = (b, run_c, run_m, c, m)
                break
            run_c += c
            run_m += m
        if found is None:
            whole = True
            break
        b, above_c, above_m, bin_c, bin_m = found
        prefix |= b << sh
        mask |= (nb - 1) << sh
        if level < 2 and (bin_c == 1 or (not by_mass and above_c + bin_c == goal)):
            break
    return dict(
        key=prefix,
        count_ge=above_c + bin_c,
        mass_ge=above_m + bin_m,
        mass_base=base,
        top_bin=top_bin,
        mass_above=above_m,
        whole=whole,
    )


def exact_row_mass(row_keys, base):
    cnt = [0] * KBINS
    s = [0] * KBINS
    for k in row_keys:
        if k:
            cnt[k >> 21] += 1
            s[k >> 21] += mantissa(k)
    tot = 0
    for b in range(KBINS):
        f = b >> 2
        tot += shifted(s[b], (f if f > 0 else 1) + base)
    return tot


def two_search_list_filter(keys, row_keys, n, joint, k, p, row_sum, slack_exp=None):
    slack_exp = SLACK_EXP if slack_exp is None else slack_exp
    use_p = p < 1
    t = radix(keys, n, False, count=k, track=use_p)
    if t["top_bin"] == 0:
        return None
    if not use_p:
        return t["key"]
    fr = max(p, 0.0)
    mass_k = t["mass_ge"]
    lo = hi = mass_k
    if joint:
        r = math.ldexp(row_sum, 150 + t["mass_base"])
        slack = r * 2.0**slack_exp
        hi = math.ceil(r + slack)
        lo = math.floor(max(r - slack - KBINS, 1.0))
        if mass_k >= mass_goal(fr, lo) and mass_k < mass_goal(fr, hi):
            lo = hi = exact_row_mass(row_keys, t["mass_base"])
        if mass_k < mass_goal(fr, lo):
            return t["key"]
    fl = t["key"]
    sub = [kk if kk >= fl else 0 for kk in keys]
    tp = radix(sub, n, True, p=fr, mass_base=hi, track=True)
    if lo != hi and not (tp["mass_above"] < mass_goal(fr, lo) and not tp["whole"]):
        tp = radix(
            sub, n, True, p=fr, mass_base=exact_row_mass(row_keys, t["mass_base"]), track=True
        )
    return max(tp["key"], t["key"])


def lab(keys_f, pos, row_keys, n, joint, k, p, row_sum, entries):
    keys = [key_of(v) for v in keys_f]
    nz = sorted((x for x in keys if x), reverse=True)
    t_k = nz[k - 1] if k <= len(nz) else 0
    set_floor = max(t_k, 1)
    size, wk, wp = warp_copy_set(keys_f, pos, set_floor, entries)
    if size > 64:
        return "fallback", None
    if size == 0:
        return "drawn", None
    mx = max(wk[:size])
    smallest = min(wk[:size])
    tf = mx >> 23
    base = mass_bits(n) - 24 - (tf if tf > 0 else 1)
    min_key = set_floor
    fr = max(p, 0.0)
    if p < 1 and bexp(smallest) + base < 0:
        return "fallback", None
    if p < 1:
        srt, cum, mass_k = warp_sort_set(wk, size, base)
        lo = hi = mass_k
        if joint:
            r = math.ldexp(row_sum, 150 + base)
            slack = r * 2.0**SLACK_EXP
            hi = math.ceil(r + slack)
            lo = math.floor(max(r - slack - KBINS, 1.0))
        glo, ghi = mass_goal(fr, lo), mass_goal(fr, hi)
        if mass_k >= glo:
            if mass_k < ghi or warp_key_reaching(srt, cum, glo) != warp_key_reaching(srt, cum, ghi):
                g = mass_goal(fr, exact_row_mass(row_keys, base))
                min_key = set_floor if mass_k < g else warp_key_reaching(srt, cum, g)
                return "exact", (min_key, wk, wp, size, mx)
            min_key = warp_key_reaching(srt, cum, ghi)
    return "drawn", (min_key, wk, wp, size, mx)


def main(trials, seed):
    rng = random.Random(seed)
    stats = dict(drawn=0, exact=0, fallback=0, same=0)
    for trial in range(trials):
        n = rng.choice([32000, 128256, 200000])
        entries = rng.choice([512, 1024])
        k = rng.randint(1, 64)
        span = rng.choice([4, 20, 23, 24, 25, 26, 40])  # binades the list's keys spread over
        m = rng.randint(1, 200)
        vals = [f32(2.0 ** -rng.uniform(1, span) * (1 + rng.random())) for _ in range(m)]
        if rng.random() < 0.2:  # ties
            vals += [vals[rng.randrange(len(vals))]] * rng.randint(1, 70)
        if rng.random() < 0.1:  # one dominant key
            vals.append(f32(rng.uniform(0.3, 0.99)))
        if rng.random() < 0.1:  # joint's goal on the top-k set's mass exactly (k keys hold half)
            k = rng.randint(1, 3)
            top = [f32(0.5 / k)] * k if rng.random() < 0.5 else [0.5] + [0.0] * 0
            k = len(top)
            rest = [2.0**-j for j in range(2, 2 + rng.randint(3, 30))]
            rest.append(rest[-1])  # 1/4 + 1/8 + ... + 2^-m + 2^-m = 1/2
            vals = top + rest
            joint, p_forced = True, 0.5
        else:
            p_forced = None
        vals = vals[:entries]
        keys_f = [0.0] * entries
        for i, v in zip(rng.sample(range(entries), len(vals)), vals):
            keys_f[i] = v
        pos = list(range(entries))
        # The row: the list's keys and more below the list's smallest (not listed).
        lowest = min(v for v in vals)
        extra = (
            []
            if p_forced is not None
            else [f32(lowest * rng.uniform(0, 0.999)) for _ in range(rng.randint(0, 300))]
        )
        row_vals = vals + [e for e in extra if e > 0]
        row_keys = [key_of(v) for v in row_vals]
        row_sum = math.fsum(row_vals)
        joint = p_forced is not None or rng.random() < 0.6
        p = (
            p_forced
            if p_forced is not None
            else f32(rng.choice([0.5, 0.9, 0.99, 0.99999, 1.0, rng.random()]))
        )
        keys = [key_of(v) for v in keys_f]
        exact_sum = row_sum
        if SUM_ERROR_EXP is not None:
            row_sum *= 1 + rng.uniform(-1, 1) * 2.0 ** float(SUM_ERROR_EXP)
        kept1 = two_search_list_filter(keys, row_keys, n, joint, k, p, row_sum)
        if SUM_ERROR_EXP is not None:
            ref = two_search_list_filter(keys, row_keys, n, joint, k, p, exact_sum, -36)
            assert (kept1 is None) == (ref is None), trial
            if ref is not None:
                assert [x and x >= kept1 for x in keys] == [x and x >= ref for x in keys], trial
            stats["same_as_exact_sum"] = stats.get("same_as_exact_sum", 0) + 1
        status, res = lab(keys_f, pos, row_keys, n, joint, k, p, row_sum, entries)
        stats[status] += 1
        if status == "fallback":
            continue
        word = rng.getrandbits(64)
        if kept1 is None:
            assert res is None, trial
            stats["same"] += 1
            continue
        t1 = direct_draw(keys_f, pos, kept1, n, word)
        min_key, wk, wp, size, mx = res
        set1 = [i for i, x in enumerate(keys) if x and x >= kept1]
        set2 = [i for i, x in enumerate(keys) if x and x >= min_key]
        assert set1 == set2, (trial, kept1, min_key, status)
        t2 = warp_draw(wk, wp, size, min_key, mx, n, word)
        assert t1 == t2, (trial, t1, t2)
        stats["same"] += 1
    print(stats)


if __name__ == "__main__":
    check_warp_steps()
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 3000,
        int(sys.argv[2]) if len(sys.argv) > 2 else 11,
    )
