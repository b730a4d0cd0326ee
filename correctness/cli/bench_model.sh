#!/usr/bin/env bash
# `parity bench model` on 2 ranks: one row per (model, rank) with counted FLOPs equal to the
# formula, rates (achieved, tokens, MFU, of-peak MFU and HFU) from the row's own FLOPs and
# time, and peak memory whose model-state part equals the parameter count times (1 value + 1
# gradient + 2 AdamW moments).
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench model --np 2 -q --models tiny --steps 2 --out model.h5
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("model.h5") as f:
    assert f.attrs["subcommand"] == "bench model", f.attrs["subcommand"]
    t = f["/bench/model"]
    ranks = sorted(t["rank"][()].tolist())
    assert ranks == [0, 1], ranks
    models = set(t["model"].asstr()[()])
    assert models == {"tiny"}, models
    for i in range(len(ranks)):
        p = int(t["parameters"][i])
        # The row describes the model it timed: tiny is 2 layers of hidden 64 over sequences of 64
        # (bench/commands/presets.cpp), and its count 12 h^2 + 13 h a block, V h + s h of tables
        # and the final norm's 2 h (tied head) follows from those figures.
        assert (t["layers"][i], t["hidden"][i], t["sequence"][i]) == (2, 64, 64), (t["layers"][i], t["hidden"][i])
        assert p == 256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64, p
        # Megatron's closed form in float64 (14 operations, reference/core/tolerance.hpp).
        assert abs(t["step_flops"][i] - t["megatron_step_flops"][i]) <= 14 * 2**-53 * t["step_flops"][i], \
            (t["step_flops"][i], t["megatron_step_flops"][i])
        assert t["tokens_per_s"][i] > 0 and t["step_time_s"][i] > 0
        assert 0 < t["mfu"][i], t["mfu"][i]
        # The rates from the row's own FLOPs and time: achieved, tokens, MFU against the same
        # run's product rate, and against the datasheet peak (NaN where there is none: CPUs).
        close = lambda a, b: abs(a - b) <= 1e-12 * abs(b)
        achieved = t["step_flops"][i] / t["step_time_s"][i] / 1e9
        assert close(t["achieved_GFLOPs"][i], achieved), (t["achieved_GFLOPs"][i], achieved)
        assert close(t["tokens_per_s"][i], t["batch"][i] * t["sequence"][i] / t["step_time_s"][i]), t["tokens_per_s"][i]
        assert close(t["mfu"][i], achieved / t["matmul_GFLOPs"][i]), (t["mfu"][i], achieved, t["matmul_GFLOPs"][i])
        peak, hardware = t["peak_GFLOPs"][i], t["hardware_step_flops"][i] / t["step_time_s"][i] / 1e9
        for name, value in (("mfu_of_peak", achieved), ("hfu_of_peak", hardware)):
            got = t[name][i]
            assert (got != got) if peak != peak else close(got, value / peak), (name, got, value, peak)
        # float32: 4 bytes per parameter value, gradient, AdamW m and v.
        assert t["peak_parameters_bytes"][i] == 4 * p, (t["peak_parameters_bytes"][i], p)
        assert t["peak_gradients_bytes"][i] == 4 * p
        assert t["peak_optimizer_state_bytes"][i] == 8 * p
        assert t["peak_activations_bytes"][i] > 0
        # The step predicted from this run's calibration (theory/calibration.hpp), beside the
        # measured one; compared only where every rank has a core.
        assert t["predicted_step_time_s"][i] > 0, t["predicted_step_time_s"][i]
        ratio = t["predicted_over_measured"][i]
        if f.attrs["oversubscribed"]:
            assert ratio != ratio, ratio
        else:
            assert abs(ratio - t["predicted_step_time_s"][i] / t["step_time_s"][i]) <= 1e-12 * ratio
    c = f["/bench/calibrate"]
    assert sorted(set(c["rank"][()].tolist())) == [0, 1] and set(c["dtype"].asstr()[()]) == {"float32"}
print("bench model: ok")
PY
