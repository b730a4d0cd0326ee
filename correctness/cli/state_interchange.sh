#!/usr/bin/env bash
# The training state to PyTorch and back: a float64 GPT trained and saved on 2 ranks under ZeRO-1
# (parity bench state --keep), exported under GPT-2's names with parity's logits
# (parity state export), made a PyTorch state_dict (bench/gpt2_torch.py to-torch), loaded into
# a PyTorch GPT-2 whose logits must equal parity's within the float64 bound (check); back
# through from-torch and parity state import, exported again, equal to the first export bit for
# bit. A GPT-2 whose query and key blocks are swapped, or whose projection is transposed, fails
# the check; a state_dict lacking a tensor is refused by import, and so are files with a NaN, a
# layer past n_layer, an untied head, another LayerNorm epsilon or sizes past the file's; bad paths are refused in one line.
# A bfloat16 state exports its float32 masters and its 16-bit values apart, and imports back.
set -euo pipefail
parity=$1; here=$2; work=$3
tool="/usr/bin/python3 $here/bench/gpt2_torch.py"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench state --np 2 -q --model tiny --precision float64 --layouts zero1 --repeats 1 --dir "$work/states" \
  --keep --out state.h5
"$parity" state export --from "$work/states/zero1-0" --out gpt2.h5 --tokens 2 > export.txt
$tool to-torch gpt2.h5 gpt2.pt > /dev/null
$tool check gpt2.h5 gpt2.pt | tee check.txt
grep -q "^PyTorch GPT-2 logits against parity's (float64, 2 rows): relative error" check.txt
$tool from-torch gpt2.pt back.h5 > /dev/null
"$parity" state import --from back.h5 --out imported > import.txt
"$parity" state export --from imported --out again.h5 --tokens 2 > /dev/null
/usr/bin/python3 - <<'PY'
import h5py, numpy as np, torch
with h5py.File("gpt2.h5") as a, h5py.File("again.h5") as b:
    names = sorted(k for k in a.keys() if k != "parity")
    assert names == sorted(k for k in b.keys() if k != "parity"), names
    assert len(names) == 2 + 12 * 2 + 2 + 1, len(names)
    # GPT-2's LayerNorm epsilon (the PyTorch model built from this file takes it from the file,
    # so a different one in parity would pass the logits' check unseen).
    assert a.attrs["layer_norm_epsilon"] == 1e-5, a.attrs["layer_norm_epsilon"]
    assert "transformer.h.1.attn.c_attn.weight" in names and "lm_head.weight" in names
    assert list(a["transformer.h.0.attn.c_attn.weight"].attrs["shape"]) == [64, 192]   # Conv1D: [in, out]
    assert list(a["transformer.h.0.mlp.c_proj.weight"].attrs["shape"]) == [256, 64]
    for k in names:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k][()], b[k][()]), k
    assert np.array_equal(a["parity/logits"][()], b["parity/logits"][()])
    # The tied head is the table.
    assert np.array_equal(a["lm_head.weight"][()], a["transformer.wte.weight"][()])
# Deliberately broken copies of the state_dict the check must reject.
state = torch.load("gpt2.pt")
c = 64
swapped = dict(state)
w = swapped["transformer.h.0.attn.c_attn.weight"].clone()
w[:, :c], w[:, c:2 * c] = state["transformer.h.0.attn.c_attn.weight"][:, c:2 * c], state["transformer.h.0.attn.c_attn.weight"][:, :c]
swapped["transformer.h.0.attn.c_attn.weight"] = w
torch.save(swapped, "swapped.pt")
transposed = dict(state)
transposed["transformer.h.1.attn.c_proj.weight"] = state["transformer.h.1.attn.c_proj.weight"].t().contiguous()
torch.save(transposed, "transposed.pt")
missing = {k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_fc.bias"}
torch.save(missing, "missing.pt")
for name in ("swapped", "transposed", "missing"):
    with open("gpt2.json") as f, open(f"{name}.json", "w") as g:
        g.write(f.read())
# Broken GPT-2 files import must refuse: a NaN in a weight, a layer the attributes do not have,
# a head that is not the table it is tied to, another LayerNorm epsilon.
import shutil
def broken(name, change):
    shutil.copy("back.h5", f"{name}.h5")
    with h5py.File(f"{name}.h5", "r+") as f:
        change(f)
def nan(f):
    w = f["transformer.h.1.mlp.c_fc.weight"]; v = w[()]; v[5] = np.nan; w[...] = v
def extra(f):
    f.copy("transformer.h.1.mlp.c_fc.weight", "transformer.h.2.mlp.c_fc.weight")
def head(f):
    w = f["lm_head.weight"]; v = w[()]; v[3] += 1; w[...] = v
def epsilon(f):
    f.attrs["layer_norm_epsilon"] = 1e-6
# Attributes of a GPT far larger than the file: once, names for 2^31 - 1 layers were made until
# memory ran out, and a 2^40 vocabulary ended in bad_alloc.
def layers(f):
    f.attrs["n_layer"] = 2**31 - 1
def vocabulary(f):
    f.attrs["vocab_size"] = 2**40
def negative(f):
    f.attrs["n_layer"] = -3
for name, change in (("nan", nan), ("extra", extra), ("head", head), ("epsilon", epsilon), ("layers", layers),
                     ("vocabulary", vocabulary), ("negative", negative)):
    broken(name, change)
print("interchange: exact round trip, tied head, Conv1D layouts")
PY
for broken in swapped transposed; do
  if $tool check gpt2.h5 $broken.pt 2> $broken.txt; then echo "the check passed a $broken GPT-2" >&2; exit 1; fi
  grep -q "beyond the bound" $broken.txt || { echo "no verdict for $broken: $(cat $broken.txt)" >&2; exit 1; }
done
$tool from-torch missing.pt missing.h5 > /dev/null
set +e
"$parity" state import --from missing.h5 --out refused 2> import-missing.txt; status=$?
"$parity" state export --from "$work/nowhere" --out x.h5 2> export-missing.txt; status2=$?
"$parity" state export --from imported --out gpt2.h5 2> export-exists.txt; status3=$?
"$parity" state import --from state.h5 --out refused 2> import-foreign.txt; status4=$?
set -e
[ $status = 2 ] && grep -q "has no transformer.h.1.mlp.c_fc.bias" import-missing.txt
[ $status2 = 2 ] && grep -q "nowhere does not exist" export-missing.txt
[ $status3 = 2 ] && grep -q "exists" export-exists.txt
[ $status4 = 2 ] && grep -q "is not a parity-gpt2 file" import-foreign.txt
for broken in nan extra head epsilon layers vocabulary negative; do
  set +e; timeout 60 "$parity" state import --from $broken.h5 --out refused 2> import-$broken.txt; status=$?; set -e
  [ $status = 2 ] || { echo "import of the $broken file: status $status, expected 2" >&2; exit 1; }
done
grep -q "transformer.h.1.mlp.c_fc.weight holds a NaN or an infinity at element 5" import-nan.txt
grep -q "holds 'transformer.h.2.mlp.c_fc.weight', which the GPT of its attributes (.* L=2 .*) does not have" import-extra.txt
grep -q "lm_head.weight differs from transformer.wte.weight, which the GPT ties it to" import-head.txt
grep -q "layer_norm_epsilon 1e-06 (parity's GPT uses 1e-05)" import-epsilon.txt
grep -q "L=2147483647 .*) describe more parameters than the [0-9]* elements the file stores" import-layers.txt
grep -q "V=1099511627776 .*) describe more parameters than the [0-9]* elements the file stores" import-vocabulary.txt
grep -q "^parity: negative.h5: GPT config (.*L=-3 .*): vocabulary, layers, hidden, heads and sequence must all be positive" import-negative.txt
[ ! -e refused ] || { echo "a refused import left refused/" >&2; exit 1; }

# A mixed-precision (bfloat16) state: --values master exports the float32 masters, --values model
# the 16-bit values, each the master rounded to nearest even. Imported, the 16-bit file gives a
# state whose masters are float32 (the 16-bit values widened) and whose values are the file's,
# with float32 AdamW moments: the tensors and types of a bfloat16 state parity trains.
"$parity" bench state --np 2 -q --model tiny --precision bfloat16 --layouts zero1 --repeats 1 --dir "$work/half" \
  --keep --out half.h5
"$parity" state export --from "$work/half/zero1-0" --out masters.h5 --tokens 0 --values master > /dev/null
"$parity" state export --from "$work/half/zero1-0" --out values.h5 --tokens 0 --values model > /dev/null
"$parity" state import --from values.h5 --out imported-half > /dev/null
"$parity" state export --from imported-half --out imported-masters.h5 --tokens 0 --values master > /dev/null
"$parity" state export --from imported-half --out imported-values.h5 --tokens 0 --values model > /dev/null
/usr/bin/python3 - <<'PY'
import glob, h5py, numpy as np
def rounded(x):  # float32 -> bfloat16 bits, to nearest even
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
def widened(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)
with h5py.File("masters.h5") as m, h5py.File("values.h5") as v, h5py.File("imported-masters.h5") as im, \
        h5py.File("imported-values.h5") as iv:
    names = sorted(k for k in m.keys() if k != "parity")
    assert names == sorted(k for k in v.keys() if k != "parity") and len(names) == 29, names
    differ = 0
    for k in names:
        assert m[k].attrs["dtype"] == "float32" and v[k].attrs["dtype"] == "bfloat16", (k, m[k].attrs["dtype"], v[k].attrs["dtype"])
        assert np.array_equal(v[k][()], rounded(m[k][()])), k
        differ += int(np.count_nonzero(widened(v[k][()]) != m[k][()]))
        assert im[k].attrs["dtype"] == "float32" and np.array_equal(im[k][()], widened(v[k][()])), k
        assert iv[k].attrs["dtype"] == "bfloat16" and np.array_equal(iv[k][()], v[k][()]), k
    assert differ > 0, "the masters are all bfloat16 values: the two exports say nothing"
# The imported state holds the tensors a bfloat16 state parity trained holds, of the same types:
# float32 masters and AdamW moments beside the 16-bit values.
def kinds(index):
    with h5py.File(index) as f:
        t = f["tensors"]
        return dict(zip(t["name"].asstr()[()], t["dtype"].asstr()[()]))
saved = sorted(glob.glob("half/zero1-0/step-*/index.h5"))
assert saved, "bench state --keep left no state in half/zero1-0"
trained, imported = kinds(saved[-1]), kinds("imported-half/step-00000000/index.h5")
assert imported == trained, sorted(set(imported.items()) ^ set(trained.items()))[:6]
assert {imported[k] for k in imported if k.endswith(("/exp_avg", "/exp_avg_sq", "/master"))} == {"float32"}
print(f"bfloat16 state: masters and 16-bit values exported apart ({differ} elements differ), imported back")
PY
echo "state interchange: ok"
