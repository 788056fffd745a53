#!/usr/bin/env bash
# make_corpus.sh: regenerate the seed corpora (the files are committed; this script documents
# them):
# - fuzz/corpus/, of fuzz_idx: small valid IDX files of every element type and rank 1..8, raw
#   and gzip (one made of two concatenated gzip members); deterministic (gzip -n).
# - fuzz/corpus_npy/, of fuzz_npy: copies of .npy files that Debian's NumPy wrote for
#   tests/datasets/npy (make_fixtures.py there): valid ones of several types, byte orders,
#   versions and ranks, and some strix refuses (Fortran order, object, structured, truncated,
#   trailing bytes, an absurd shape, rank 9).
# - fuzz/corpus_safetensors/ and fuzz/corpus_llmc/, of fuzz_safetensors and fuzz_llmc: written by
#   make_st_corpus.py (its docstring lists them).
# - fuzz/corpus_model/, of fuzz_model: the real files make_model_corpus.c writes (models, one
#   with fused nodes, checkpoints of three optimisers, a fused training graph, the hostile files
#   that once crashed the loader), built with the Release build in build/ (deterministic on one
#   machine). Files named crash-* are inputs that once crashed a loader or failed a check of
#   fuzz_model (found by fuzzing): kept as regressions, never regenerated.
#     fuzz/make_corpus.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

cmake -S .. -B ../build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build ../build --target make_model_corpus >/dev/null
mkdir -p corpus_model
rm -f corpus_model/{model,ckpt,graph,hostile}_*.sxm
../build/fuzz/make_model_corpus corpus_model
ls -l corpus_model

# model.dict: a libFuzzer dictionary of every op name as the file stores it (u32 length, bytes):
# graph ops (sx_ops.def), map and binary ops of fused programs (sx_map.def, sx_binary.def).
{
    echo "# fuzz_model's dictionary, written by make_corpus.sh: op names as stored in files"
    {
        sed -n 's/^X([A-Z0-9_]*, *\([a-z0-9_]*\),.*/\1/p' ../include/strix/sx_ops.def
        sed -n 's/^X([A-Z0-9_]*, *"\([a-z0-9_]*\)",.*/\1/p' ../include/strix/sx_map.def ../include/strix/sx_binary.def
    } | sort -u | while read -r name; do
        printf '"\\x%02x\\x00\\x00\\x00%s"\n' "${#name}" "$name"
    done
    for tag in STRIXMDL GRPH TENS META "END "; do printf '"%s"\n' "$tag"; done
} >model.dict

python3 make_st_corpus.py

rm -rf corpus_npy
mkdir corpus_npy
for f in le_f4 le_b1 le_u8 be_f8 be_i2 v2_f4 v3_f4 scalar_f8 empty_f4 vector_i8 bad_fortran \
    bad_object bad_structured bad_truncated bad_trailing bad_absurd bad_rank9; do
    cp ../tests/datasets/npy/$f.npy corpus_npy/
done

rm -rf corpus
mkdir corpus

byte() { printf '%b' "\\x$(printf %02x "$(($1 & 255))")"; }
be32() { byte $(($1 >> 24)); byte $(($1 >> 16)); byte $(($1 >> 8)); byte "$1"; }

# idx NAME TYPE ELEM_BYTES DIM...: a header and a deterministic payload (byte i = i*37+11).
idx() {
    local name=$1 type=$2 es=$3
    shift 3
    local n=1 d
    for d in "$@"; do n=$((n * d)); done
    {
        byte 0; byte 0; byte "$type"; byte $#
        for d in "$@"; do be32 "$d"; done
        for ((i = 0; i < n * es; i++)); do byte $((i * 37 + 11)); done
    } >"corpus/$name"
}

{ # labels 0..9, twice
    byte 0; byte 0; byte 8; byte 1; be32 20
    for ((i = 0; i < 20; i++)); do byte $((i % 10)); done
} >corpus/u8_labels
idx u8_images 0x08 1 2 4 4
idx u8_channels 0x08 1 1 2 2 3
idx i8_matrix 0x09 1 3 3
idx i16_matrix 0x0B 2 2 3
idx i32_vector 0x0C 4 4
idx f32_matrix 0x0D 4 2 2
idx f64_vector 0x0E 8 3
idx u8_rank8 0x08 1 1 2 1 1 1 1 2 1
for f in u8_labels u8_images f64_vector; do gzip -9n -c "corpus/$f" >"corpus/$f.gz"; done
head -c 20 corpus/u8_images | gzip -9n -c >corpus/two_members.gz
tail -c +21 corpus/u8_images | gzip -9n -c >>corpus/two_members.gz
ls -l corpus
