#!/bin/sh
# ctest: gpt_train's checkpoints round-trip. A run saves its initial weights (--save-init KIND)
# and trains 3 steps; a run with another seed starts from that file (--init KIND) and must print
# the same losses, step by step. Usage: gpt_train_init_test.sh GPT_TRAIN KIND DIR
set -eu
bin=$1 kind=$2 dir=$3
args="--limit 20000 --layers 2 --dim 32 --heads 4 --seq 16 --batch 4 --steps 3 --bench --clip 0"
mkdir -p "$dir"
"$bin" $args --seed 5 --save-init "$kind" "$dir/init.$kind" | grep '^step' | cut -d' ' -f1-4 >"$dir/a"
"$bin" $args --seed 9 --init "$kind" "$dir/init.$kind" | grep '^step' | cut -d' ' -f1-4 >"$dir/b"
"$bin" $args --seed 9 | grep '^step' | cut -d' ' -f1-4 >"$dir/c"
test "$(wc -l <"$dir/a")" -eq 3
cmp "$dir/a" "$dir/b"
# and the seed matters (the check would be empty if it did not)
! cmp -s "$dir/a" "$dir/c"
echo "gpt_train $kind: the same losses from the saved weights"
