#!/usr/bin/env bash
# The end-to-end runs of issue 75 on the photo sets, one process per set, run and seed, many at a time: for a
# machine with many cores and a GPU (the students train there: bench_adapt --device cuda; the teachers, releases
# and decoding stay on one CPU thread each). It needs the sets' files (LDPCLIENT_CIFAR10, LDPCLIENT_FASHION), the
# cached teachers in benchmarks/.cache, and python3 (or $PYTHON) with this checkout's dependencies. Rows go to
# $OUT/end_to_end.jsonl (copied there every 15 s, so a run cut short keeps what finished), each process's log to
# $OUT/logs.txt (its last lines). JOBS: processes at a time (default: the cores); DEVICE: where the students
# train (default cuda); SETS: "set teacher public-images" triples, ";"-separated (default: the four below).
#
#     OUT=/tmp/e2e bash benchmarks/end_to_end_parallel.sh
#     SETS="colour-digits small_cnn 500" DEVICE=cpu JOBS=2 OUT=/tmp/e2e bash benchmarks/end_to_end_parallel.sh
set -u
OUT=${OUT:-/tmp/end_to_end}
JOBS=${JOBS:-$(nproc)}
DEVICE=${DEVICE:-cuda}
SETS=${SETS:-"cifar10 small_cnn 5000;fashion small_cnn 5000;cifar10 resnet 5000;colour-digits small_cnn 500"}
export DEVICE
mkdir -p "$OUT" /tmp/e2e-runs
run_args() {  # set, teacher, public images, seed
    echo "--dataset $1 --teacher $2 --public $3 --seeds 1 --seed-from $4 --device $DEVICE"
}
jobs_list() {
    # per set of SETS and seed: zero-privacy, pca with --decode auto, pca and dct without; then dct with auto
    IFS=";" read -ra sets <<<"$SETS"
    for set in "${sets[@]}"; do
        read -r d t n <<<"$set"
        for s in 0 1 2; do
            common=$(run_args "$d" "$t" "$n" "$s")
            echo "$d-$t-free-$s $common --basis dct --modes data-free"
            echo "$d-$t-pca-auto-$s $common --basis pca --modes ldpkit --decode auto"
            echo "$d-$t-pca-none-$s $common --basis pca --modes ldpkit"
            echo "$d-$t-dct-none-$s $common --basis dct --modes ldpkit"
        done
    done
    for set in "${sets[@]}"; do
        read -r d t n <<<"$set"
        for s in 0 1 2; do
            echo "$d-$t-dct-auto-$s $(run_args "$d" "$t" "$n" "$s") --basis dct --modes ldpkit --decode auto"
        done
    done
}
one() {
    name=$1; shift
    "${PYTHON:-python3}" benchmarks/bench_adapt.py "$@" --out "/tmp/e2e-runs/$name.jsonl" >"/tmp/e2e-runs/$name.log" 2>&1
    echo "$name exit $?" >>/tmp/e2e-runs/done.txt
}
export -f one
(while true; do
    sleep 15
    cat /tmp/e2e-runs/*.jsonl >"$OUT/end_to_end.jsonl" 2>/dev/null
    for f in /tmp/e2e-runs/*.log; do echo "== $f"; tail -n 2 "$f"; done >"$OUT/logs.txt" 2>/dev/null
    cp /tmp/e2e-runs/done.txt "$OUT/done.txt" 2>/dev/null
done) &
copier=$!
jobs_list | xargs -P "$JOBS" -L 1 bash -c 'one "$@"' _
sleep 1
cat /tmp/e2e-runs/*.jsonl >"$OUT/end_to_end.jsonl"
cp /tmp/e2e-runs/done.txt "$OUT/done.txt"
kill $copier
