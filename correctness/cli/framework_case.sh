#!/usr/bin/env bash
# Conformance for other frameworks (docs/framework-conformance.md): parity case export writes a
# case, correctness/frameworks/torch_case.py trains it with PyTorch on 2 processes (gloo), and
# parity case compare must pass DDP with accumulation (float32), ZeRO-1 (float64), Megatron-style
# tensor parallelism (dp 2 x tp 2, float32) and a pipeline (dp 2 x pp 2); must fail, naming the first divergence with the right
# diagnosis, the known bugs (gradients summed over the ranks, losses summed over the accumulation
# steps, weight decay on biases and norms, the row-parallel bias reduced over tp or added on every
# tp rank, gradients clipped
# per rank before the reduction, every rank applying the same dropout mask, the tied table's copies
# on a pipeline's ends not summed, a float64 case's loss computed in float32); and must
# refuse in one line (exit 2) results of another case, a missing tensor, a tensor of the wrong
# size, a NaN loss, shards that miss an element or overlap, and a case whose masks were edited;
# results given as shards with their offsets must compare as whole tensors do.
set -uo pipefail
parity=$1; here=$2; work=$3
torch_case="/usr/bin/python3 $here/correctness/frameworks/torch_case.py"
rm -rf "$work"; mkdir -p "$work"; cd "$work" || exit 1
fail() { echo "framework_case.sh: $*" >&2; exit 1; }
# compare CASE RESULTS WANT_STATUS [TEXT]: the status, and TEXT in the output when given.
compare() {
  "$parity" case compare "$1" "$2" > out.txt 2> err.txt
  local status=$?
  [ "$status" -eq "$3" ] || { cat out.txt err.txt >&2; fail "compare $1 $2: status $status, expected $3"; }
  if [ -n "${4:-}" ]; then grep -qF -- "$4" out.txt err.txt || { cat out.txt err.txt >&2; fail "compare $1 $2: no '$4'"; }; fi
  return 0
}
one_line() { [ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt >&2; fail "not one line"; }; }
/usr/bin/python3 -c "import torch, h5py" 2>/dev/null || { echo "PyTorch or h5py missing (ci/setup.sh installs them)"; exit 77; }

# case NAME EXPORT-ARGS...: NAME.h5 exported. train NAME RESULTS [TORCH-ARGS...]: a PyTorch job,
# all of them trained by one torch_case.py process (PyTorch imported once) by train_all.
# trained NAME RESULTS STATUS TEXT: the comparison of NAME.h5 with RESULTS.h5: STATUS, and TEXT in
# what compare says.
case_file() { local name=$1; shift; "$parity" case export --out "$name.h5" "$@" > /dev/null || fail "export $name $*"; }
: > jobs.txt
train() { local name=$1 results=$2; shift 2; echo "$name.h5 $results.h5 $*" >> jobs.txt; }
train_all() { $torch_case --jobs jobs.txt > torch.txt 2>&1 || { cat torch.txt >&2; fail "torch_case --jobs: $(tail -n 1 torch.txt)"; }; }
trained() { compare "$1.h5" "$2.h5" "$3" "$4"; }
# dp 2 x 3 accumulation steps in float32 (dp and accumulation differ, so their factors do); ZeRO-1
# in float64 (float64's bounds); Megatron-style dp 2 x tp 2; gradients clipped to the global norm
# 0.5 (every step clips), as torch.nn.utils.clip_grad_norm_; dropout 0.1 after attention and after
# the MLP with the case's masks, each rank its own rows'; a GPipe pipeline of 2 stages (3
# micro-batches) beside dp 2, with dropout and clipping; DDP and ZeRO-1 over 4 ranks; DDP computing
# in bfloat16 (autocast) against float64, within the 16-bit bounds.
case_file acc --dp 2 --accumulation 3 --global-batch 12 --precision float32
case_file zero --dp 2 --zero 1 --precision float64
case_file tp --dp 2 --tp 2 --precision float32
case_file clip --dp 2 --accumulation 3 --global-batch 12 --clip-grad-norm 0.5
case_file drop --dp 2 --accumulation 3 --global-batch 12 --dropout 0.1
case_file acc4 --dp 4 --global-batch 8 --precision float32
case_file half --dp 2 --accumulation 3 --global-batch 12 --precision bfloat16
case_file zero4 --dp 4 --zero 1 --global-batch 8 --precision float32
case_file pipe --dp 2 --pp 2 --accumulation 3 --global-batch 12 --dropout 0.1 --clip-grad-norm 0.5
case_file acc2 --dp 2 --accumulation 3 --global-batch 12 --precision float32 --steps 2
train acc ddp
train acc2 ddp2
train zero zero1 --mode zero1
train tp tp2 --mode tp
train clip clipped
train drop dropped
train pipe piped --mode pp
train acc4 ddp4
train half bf16
train zero4 zero14 --mode zero1
# Known bugs, each its own results file.
train drop bug_same_dropout --bug same_dropout
train clip bug_clip_per_rank --bug clip_per_rank
train tp bug_row_bias_reduced --mode tp --bug row_bias_reduced
train tp bug_row_bias_every_rank --mode tp --bug row_bias_every_rank
train acc bug_ddp_sum --bug ddp_sum
train half bug_ddp_sum_half --bug ddp_sum
train acc bug_accumulation_sum --bug accumulation_sum
train acc bug_decay_all --bug decay_all
train pipe bug_tied_unsummed --mode pp --bug tied_unsummed
train zero bug_float32_loss --mode zero1 --bug float32_loss
train_all
[ "$(grep -c "trained with PyTorch" torch.txt)" -eq "$(wc -l < jobs.txt)" ] || { cat torch.txt >&2; fail "not every job said it trained"; }
trained acc ddp 0 "conforms"
# The loss after s steps is held to the bound the parameters after s steps are (the training
# bound of s steps): the 3-step case's last loss against the parameters of the same case run 2 steps.
loss_bound=$(sed -n 's/^  loss, step 2: .*(bound \([^)]*\)).*/\1/p' out.txt)
trained acc2 ddp2 0 "conforms"
parameters_bound=$(sed -n 's/^  parameters after step 1: .*(bound \([^)]*\)).*/\1/p' out.txt)
[ -n "$loss_bound" ] && [ "$loss_bound" = "$parameters_bound" ] ||
  fail "step 2's loss is held to $loss_bound, the parameters after 2 steps to $parameters_bound"
trained zero zero1 0 "conforms"
trained tp tp2 0 "conforms"
trained clip clipped 0 "conforms"
trained drop dropped 0 "conforms"
trained pipe piped 0 "conforms"
trained acc4 ddp4 0 "conforms"
trained half bf16 0 "conforms"
trained zero4 zero14 0 "conforms"

# Known bugs: caught, with the first divergence and the diagnosis.
trained drop bug_same_dropout 1 "the ranks share one mask instead of each drawing its own rows'"
grep -q "^first divergence: step 0: the loss" out.txt || fail "same_dropout: first divergence not at step 0's loss"
trained clip bug_clip_per_rank 1 "clipped per rank before the reduction instead of after it"
trained tp bug_row_bias_reduced 1 "only the row-parallel biases (c_proj.bias) differ, 2 x the single device's"
trained tp bug_row_bias_every_rank 1 "the bias added on every tensor-parallel rank before the all-reduce"
grep -q "^first divergence: step 1: the loss" out.txt || fail "row_bias_every_rank: first divergence not at step 1's loss"
trained acc bug_ddp_sum 1 "summed over the 2 data-parallel ranks instead of averaged"
trained half bug_ddp_sum_half 1 "summed over the 2 data-parallel ranks instead of averaged"
grep -q "^first divergence: step 0: the first step's gradients" out.txt || fail "ddp_sum: first divergence not at step 0's gradients"
trained acc bug_accumulation_sum 1 "the loss summed over the 3 accumulation steps instead of averaged"
trained acc bug_decay_all 1 "weight decay applied to them"
trained pipe bug_tied_unsummed 1 "only the tied token table's gradient differs"
trained zero bug_float32_loss 1 "the framework computes in float32"

# Results as shards with their offsets (each rank's flat range, as ZeRO holds them): the DDP
# results split in three uneven pieces per tensor conform, an empty shard beside them too; a
# shard missing, two overlapping or one far past the end are refused.
/usr/bin/python3 - <<'PY'
import shutil, h5py, numpy as np
def split(source, target, damage=None):
    with h5py.File(source) as a, h5py.File(target, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v
        b.create_dataset("loss", data=a["loss"][()]).attrs["dtype"] = "float64"
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset) or name == "loss":
                return
            data = obj[()]
            cuts = [0, len(data) // 3, len(data) // 3 + len(data) // 2, len(data)]
            for i in range(3):
                first, last = cuts[i], cuts[i + 1]
                if damage == "gap" and name.endswith("c_fc.bias") and i == 1:
                    continue
                if damage == "overlap" and name.endswith("c_fc.bias") and i == 1:
                    first -= 1
                if damage == "far" and name.endswith("c_fc.bias") and i == 2:
                    first = 2**63 - 2
                ds = b.create_dataset(f"{name}/shard{i}", data=data[cuts[i] if damage == "far" else first:last])
                ds.attrs["dtype"] = "float64"
                ds.attrs["offset"] = np.int64(first)
            if damage == "empty" and name.endswith("c_fc.bias"):
                ds = b.create_dataset(f"{name}/shard_empty", data=data[0:0])
                ds.attrs["dtype"] = "float64"
                ds.attrs["offset"] = np.int64(0)
        a.visititems(visit)
split("ddp.h5", "shards.h5")
split("ddp.h5", "gap.h5", "gap")
split("ddp.h5", "overlap.h5", "overlap")
split("ddp.h5", "empty.h5", "empty")
split("ddp.h5", "far.h5", "far")
PY
compare acc.h5 shards.h5 0 "conforms"
compare acc.h5 empty.h5 0 "conforms"  # a rank holding none of a tensor
compare acc.h5 gap.h5 2 "no shard holds element"; one_line
compare acc.h5 overlap.h5 2 "is in two shards"; one_line
compare acc.h5 far.h5 2 "elements from element 9223372036854775806 of a tensor of"; one_line

# Results made from the DDP run's: its gradients 6 x (summed over the dp ranks and over the
# accumulation steps) and 0.5 x (averaged twice), and one parameter of block 1 moved after the
# last step: each caught, the first two diagnosed by their factor, the third named by its block.
/usr/bin/python3 - <<'PY'
import shutil, h5py
def changed(target, gradients=None, moved=None):
    shutil.copy("ddp.h5", target)
    with h5py.File(target, "r+") as f:
        if gradients is not None:
            f["gradients"].visititems(lambda name, d: d.__setitem__(Ellipsis, d[()] * gradients)
                                      if isinstance(d, h5py.Dataset) else None)
        if moved:
            d = f[moved]
            v = d[()]
            v[0] += 1.0
            d[...] = v
changed("summed_both.h5", gradients=6)
changed("averaged_twice.h5", gradients=0.5)
changed("moved.h5", moved="parameters/transformer.h.1.mlp.c_fc.bias")
PY
compare acc.h5 summed_both.h5 1 "6 x the single device's: summed over the dp ranks and over the accumulation steps instead of averaged"
compare acc.h5 averaged_twice.h5 1 "0.5 x the single device's: averaged over the data-parallel ranks twice"
compare acc.h5 moved.h5 1 "after step 2: the parameters, largest in transformer.h.1.mlp.c_fc.bias (block 1)"

# Bad input: one line on stderr, exit 2.
compare zero.h5 ddp.h5 2 "holds results of case"; one_line
# A case that differs from the DDP run's in one setting alone is another case: its results are
# refused, whichever setting it is.
for change in "--clip-grad-norm 0.5" "--dropout 0.1" "--steps 4" "--zero 1" "--tp 2" "--model small"; do
  # shellcheck disable=SC2086
  "$parity" case export --out other.h5 --force --dp 2 --accumulation 3 --global-batch 12 --precision float32 $change > /dev/null \
    || fail "export with $change"
  compare other.h5 ddp.h5 2 "holds results of case"; one_line
done
/usr/bin/python3 - <<'PY'
import shutil, h5py, numpy as np
for name, change in (("missing.h5", lambda f: f.__delitem__("gradients/transformer.h.1.mlp.c_fc.bias")),
                     ("short.h5", lambda f: (f.__delitem__("parameters/transformer.ln_f.weight"),
                                             f.create_dataset("parameters/transformer.ln_f.weight", data=np.zeros(3))[()])),
                     ("nan.h5", lambda f: f["loss"].__setitem__(1, np.nan)),
                     ("inf.h5", lambda f: f["loss"].__setitem__(0, np.inf)),
                     ("strings.h5", lambda f: (f.__delitem__("parameters/transformer.ln_f.bias"),
                                               f.create_dataset("parameters/transformer.ln_f.bias", data=[b"x"] * 3)))):
    shutil.copy("ddp.h5", name)
    with h5py.File(name, "r+") as f:
        change(f)
        if name in ("short.h5", "strings.h5"):
            path = "parameters/transformer.ln_f." + ("weight" if name == "short.h5" else "bias")
            f[path].attrs["dtype"] = "float64"
PY
compare acc.h5 missing.h5 2 "has no /gradients/transformer.h.1.mlp.c_fc.bias"; one_line
compare acc.h5 short.h5 2 "/parameters/transformer.ln_f.weight has 3 elements"; one_line
compare acc.h5 nan.h5 2 "the loss of step 1 is nan"; one_line
compare acc.h5 inf.h5 2 "the loss of step 0 is inf"; one_line
compare acc.h5 strings.h5 2 "/parameters/transformer.ln_f.bias holds no numbers, though its dtype attribute says float64"; one_line
# A case whose masks are not the ones parity draws for it (edited, or from another version).
cp drop.h5 edited.h5
/usr/bin/python3 -c "
import h5py
with h5py.File('edited.h5', 'r+') as f:
    d = f['batches/1/dropout/transformer.h.0.mlp']; v = d[()]; v[5] = 1 - v[5]; d[...] = v"
compare edited.h5 dropped.h5 2 "/batches/1/dropout/transformer.h.0.mlp is not the mask parity draws"; one_line
# A case whose batches were edited to hold a token outside the vocabulary.
for token in 1000000 -1 256; do
  cp drop.h5 tokens.h5
  /usr/bin/python3 -c "
import h5py, sys
with h5py.File('tokens.h5', 'r+') as f:
    d = f['batches/0/targets']; v = d[()]; v.flat[3] = int(sys.argv[1]); d[...] = v" "$token"
  compare tokens.h5 dropped.h5 2 "/batches/0/targets holds"; one_line
  grep -q "at 3, not a token of the vocabulary of" err.txt || fail "token $token: $(cat err.txt)"
done
"$parity" case export --out bad.h5 --dp 2 --accumulation 3 --global-batch 8 > out.txt 2> err.txt
[ $? -eq 2 ] && grep -q "must be a positive multiple of dp x accumulation" err.txt || fail "export: an uneven batch not refused"
[ ! -e bad.h5 ] || fail "a refused export left a file"
"$parity" case compare acc.h5 /nonexistent.h5 > out.txt 2> err.txt
[ $? -eq 2 ] || fail "a missing results file not refused"
echo "framework_case.sh: PyTorch DDP (accumulation), ZeRO-1, tp and pp conform; ddp_sum, accumulation_sum, decay_all, row_bias_reduced, row_bias_every_rank, clip_per_rank, same_dropout, tied_unsummed and float32_loss caught and diagnosed; bad input refused"
