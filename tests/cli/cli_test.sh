#!/usr/bin/env bash
# The kiln command's error exit, run as a user would: every failure is one line "kiln: ..." on
# stderr and exit status 1, never an abort. Usage: cli_test.sh KILN_BINARY SCENARIO [PROGRAM]
# (fusion_bisect: PROGRAM is the fused program to bisect, tests/cli/fused_chains.cpp).
set -uo pipefail
kiln=$1
scenario=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_cli_${scenario}.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect STATUS TEXT -- ARGS...: runs kiln ARGS; checks the status, and that TEXT is in stderr
# (status 1: stderr is exactly one line starting "kiln: ") or in stdout (status 0).
expect() {
  local status=$1 text=$2
  shift 3
  "$kiln" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" -ne "$status" ]; then
    fail "kiln $* exited $got, expected $status; stderr: $(head -c 2000 "$work/err")"
    return
  fi
  if [ "$status" -eq 0 ]; then
    grep -qF -- "$text" "$work/out" || fail "kiln $*: stdout lacks '$text': $(tail -5 "$work/out")"
    return
  fi
  local lines
  lines=$(wc -l <"$work/err")
  [ "$lines" -eq 1 ] || fail "kiln $*: stderr has $lines lines, not one: $(cat "$work/err")"
  grep -q '^kiln: ' "$work/err" || fail "kiln $*: stderr does not start with 'kiln: ': $(cat "$work/err")"
  grep -qF -- "$text" "$work/err" || fail "kiln $*: stderr lacks '$text': $(cat "$work/err")"
}

flip_last_byte() {
  local size byte
  size=$(stat -c %s "$1")
  byte=$(od -An -tu1 -j $((size - 1)) -N1 "$1" | tr -d ' ')
  # shellcheck disable=SC2059
  printf "\\$(printf '%03o' $((byte ^ 16)))" | dd of="$1" bs=1 seek=$((size - 1)) conv=notrunc status=none
}

case "$scenario" in
  commands)
    expect 1 "kiln: unknown command 'foo'; commands: info, train, embed, fusion-bisect" -- foo
    expect 1 "kiln: unknown command 'train foo'; train commands: digits, charlm" -- train foo
    expect 1 "kiln: a command is required; commands: info, train, embed, fusion-bisect" --
    expect 1 "kiln: 'train' needs a command; train commands: digits, charlm" -- train
    expect 1 "kiln: " -- info unexpected
    expect 1 "kiln: " -- train digits --no-such-option
    expect 1 "--epochs" -- train digits --epochs abc
    expect 0 "train" -- --help
    ;;
  counts)
    expect 1 "kiln: [train digits] --epochs must be at least 1, got -1" -- train digits --epochs -1
    expect 1 "--epochs must be at least 1, got 0" -- train digits --epochs 0
    expect 1 "kiln: [train charlm] --steps must be at least 1, got 0" -- train charlm --steps 0
    expect 1 "--steps must be at least 1, got -5" -- train charlm --steps -5
    expect 1 "--context must be between 2 and 1024, got 1" -- train charlm --context 1
    expect 1 "--context must be between 2 and 1024, got 5000" -- train charlm --context 5000
    expect 1 "--sample-every must be at least 1, got 0" -- train charlm --sample-every 0
    expect 1 "must be a non-negative integer, got -1" -- train digits --seed -1
    expect 1 "must be a non-negative integer, got -2" -- train charlm --seed -2
    expect 1 "--precision: f64 not in {f32,bf16,f16}" -- train charlm --precision f64
    expect 1 "--precision: int8 not in {f32,bf16,f16}" -- train digits --precision int8
    expect 0 "bf16 mixed precision" -- train charlm --steps 2 --sample-every 2 --precision bf16
    expect 1 "--quantize: q2_k not in {q8_0,q4_0,q4_k}" -- train charlm --quantize q2_k
    expect 1 "--width must be a multiple of the 4 heads, got 6" -- train charlm --width 6
    expect 1 "--width must be between 4 and 1024, got 0" -- train charlm --width 0
    # The last tenth held out: the float and the quantized model's validation losses.
    expect 0 "loss  f32 " -- train charlm --steps 2 --sample-every 2 --quantize q8_0
    grep -qE "weights quantized as Q8_0 x11" "$work/out" || fail "no Q8_0 weights: $(cat "$work/out")"
    grep -qE "q8_0 [0-9.]+  \([-+][0-9.]+ %\)" "$work/out" || fail "no q8_0 loss: $(cat "$work/out")"
    # q4_k: rows of 96 and 384 values are not whole 256-value blocks; they take Q5_0.
    expect 0 "weights quantized as Q5_0 x11" -- train charlm --steps 2 --sample-every 2 --quantize q4_k
    # Quantization-aware training: the float model's loss is its fake-quantized forward.
    expect 0 "loss  f32 fake-quantized " -- train charlm --steps 2 --sample-every 2 --quantize q4_k --qat
    grep -qE "weights quantized as Q5_0 x11" "$work/out" || fail "QAT lost the fallback: $(cat "$work/out")"
    expect 1 "--qat trains for the scheme --quantize names" -- train charlm --steps 2 --qat
    expect 0 "weights quantized as Q4_K x11" -- \
      train charlm --steps 2 --sample-every 2 --quantize q4_k --width 256 --context 16
    # Data-parallel over two ranks of this process (Gloo on the CPU): each trains on half of
    # every batch, and the loss printed is the global batch's, as one process prints it. Without
    # Gloo (kiln info says so) two ranks are refused, naming it.
    if "$kiln" info | grep -q '^  gloo     compiled in'; then
      expect 0 "data-parallel over 2 ranks (gloo): 16 windows of every batch of 32 on rank 0" -- \
        train charlm --steps 3 --sample-every 3 --devices cpu,cpu
      two=$(grep -oE "step 3/3  loss [0-9.]+" "$work/out" | grep -oE "[0-9.]+$")
      expect 0 "step 3/3" -- train charlm --steps 3 --sample-every 3 --devices cpu
      one=$(grep -oE "step 3/3  loss [0-9.]+" "$work/out" | grep -oE "[0-9.]+$")
      awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; exit !(a != "" && d < 0.002 && d > -0.002) }' ||
        fail "charlm's loss on 2 ranks ($two) is not the one of one process ($one)"
    else
      expect 1 "needs Gloo, and kiln was built without it" -- \
        train charlm --steps 3 --sample-every 3 --devices cpu,cpu
    fi
    expect 1 "--devices 'cpu,,cpu' has an empty entry" -- train charlm --devices cpu,,cpu
    expect 1 "--devices names 33 devices; at most 32" -- \
      train charlm --devices "$(printf 'cpu,%.0s' {1..32})cpu"
    ;;
  out_dir)
    echo x >"$work/file"
    expect 1 "cannot create the run directory $work/file" -- train digits --epochs 1 --out "$work/file"
    expect 1 "cannot create the run directory $work/file/sub" -- \
      train digits --epochs 1 --out "$work/file/sub"
    expect 1 "cannot create the run directory /proc/kiln_cli_test/run" -- \
      train digits --epochs 1 --out /proc/kiln_cli_test/run
    ;;
  inputs)
    expect 1 "kiln: [train charlm] /dev/zero: is larger than 1 GiB, the limit for this input" -- \
      train charlm /dev/zero
    expect 1 "[train digits] /dev/zero: is larger than 1 GiB" -- train digits --data /dev/zero
    expect 1 "$work/missing.txt: cannot open: No such file or directory" -- \
      train charlm "$work/missing.txt"
    expect 1 "$work: is a directory, not a file" -- train charlm "$work"
    printf 'tiny' >"$work/tiny.txt"
    expect 1 "has 4 characters; it needs more than the context of 64" -- train charlm "$work/tiny.txt"
    head -c 100 /dev/zero | tr '\0' 'a' >"$work/short.txt"
    expect 1 "has 100 characters: too few to hold out 65 for validation" -- \
      train charlm "$work/short.txt" --quantize q8_0
    ;;
  resume)
    run="$work/run"
    expect 0 "test accuracy" -- train digits --epochs 1 --seed 1 --out "$run"
    expect 1 "seed 2 here but 1 in the run" -- train digits --epochs 1 --seed 2 --out "$run"
    grep -qF -- "--fresh" "$work/err" || fail "the refusal does not mention --fresh: $(cat "$work/err")"
    expect 0 "test accuracy" -- train digits --epochs 1 --seed 2 --out "$run" --fresh
    expect 0 "extending the run from 1 to 2 epochs" -- train digits --epochs 2 --seed 2 --out "$run"
    expect 1 "epochs 1 here but 2 in the run" -- train digits --epochs 1 --seed 2 --out "$run"
    # A flipped data byte in the newest checkpoint: the run goes on from the one before.
    flip_last_byte "$run/model-2.safetensors"
    expect 0 "warning: the checkpoint of epoch 2 is unusable" -- \
      train digits --epochs 2 --seed 2 --out "$run"
    grep -qF "resuming from epoch 1" "$work/out" || fail "no fallback to epoch 1: $(cat "$work/out")"
    ;;
  embed)
    # same_numbers A B: the files hold the same arrays, number by number within 1e-5 (a batch's
    # padding changes the products' blocking, so the last bits may differ).
    same_numbers() {
      awk -F'[][,]' 'NR == FNR { for (i = 2; i < NF; ++i) want[FNR, i] = $i; lines = FNR; next }
        { for (i = 2; i < NF; ++i) { d = $i - want[FNR, i]; if (d < -1e-5 || d > 1e-5) bad = 1 } }
        END { if (bad || FNR != lines) exit 1 }' "$1" "$2"
    }
    model=$3/tiny_sentence_model
    texts=$3/texts.txt
    # One JSON array per text and line, in order: from arguments, from stdin, and both mixed.
    expect 0 "[" -- embed "$model" "A man is eating food." "Someone eats"
    [ "$(wc -l <"$work/out")" -eq 2 ] || fail "embed: not two lines: $(cat "$work/out")"
    grep -qvE '^\[-?[0-9][^],]*(,-?[0-9][^],]*){15}\]$' "$work/out" &&
      fail "embed: a line is not an array of 16 numbers: $(cat "$work/out")"
    cp "$work/out" "$work/from_args"
    "$kiln" embed "$model" - <"$texts" >"$work/from_stdin" 2>"$work/err" || fail "embed - failed: $(cat "$work/err")"
    [ "$(wc -l <"$work/from_stdin")" -eq "$(wc -l <"$texts")" ] ||
      fail "embed -: $(wc -l <"$work/from_stdin") lines for $(wc -l <"$texts") texts"
    head -2 "$work/from_stdin" >"$work/first_two"
    same_numbers "$work/first_two" "$work/from_args" ||
      fail "embed: stdin and arguments differ: $(head -2 "$work/from_stdin")"
    # Batches of one give what one batch gives (padding never counts).
    "$kiln" embed "$model" - --batch 1 <"$texts" >"$work/batch1" 2>"$work/err"
    same_numbers "$work/batch1" "$work/from_stdin" || fail "embed --batch 1 differs from one batch"
    echo "Someone eats" | "$kiln" embed "$model" "A man is eating food." - >"$work/mixed"
    same_numbers "$work/mixed" "$work/from_args" || fail "embed: text then - differs: $(cat "$work/mixed")"
    expect 1 "--batch must be at least 1" -- embed "$model" x --batch 0
    expect 1 "is not a directory" -- embed "$work/absent" x
    mkdir -p "$work/broken" && cp -r "$model/." "$work/broken" && echo '{' >"$work/broken/modules.json"
    expect 1 "modules.json is not JSON" -- embed "$work/broken" x
    ;;
  serve)
    # The server refuses to start without a token, and serves a training run over loopback.
    expect 1 "--token-file" -- serve
    expect 1 "cannot read the token file" -- serve --token-file "$work/absent"
    : >"$work/empty"
    expect 1 "is empty" -- serve --token-file "$work/empty"
    echo "cli-test-token" >"$work/token"
    "$kiln" serve --port 0 --token-file "$work/token" >"$work/serve.log" 2>&1 &
    server=$!
    port=""
    for _ in $(seq 200); do
      port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/serve.log")
      [ -n "$port" ] && break
      sleep 0.05
    done
    if [ -z "$port" ]; then
      fail "kiln serve did not start: $(cat "$work/serve.log")"
    else
      KILN_DEVICE=remote://127.0.0.1:$port KILN_REMOTE_TOKEN=wrong expect 1 "refused the token" -- \
        train digits --epochs 1 --out "$work/wrong"
      KILN_DEVICE=remote://127.0.0.1:$port KILN_REMOTE_TOKEN=cli-test-token expect 0 "accuracy" -- \
        train digits --epochs 1 --out "$work/digits"
      for _ in $(seq 100); do
        grep -q "session 2 .*client closed" "$work/serve.log" && break
        sleep 0.05
      done
      grep -q "session 1 .*refused: wrong token" "$work/serve.log" ||
        fail "no log line for the refused session: $(cat "$work/serve.log")"
      grep -q "session 2 .*[1-9][0-9]* ops (0 failed).*client closed" "$work/serve.log" ||
        fail "no log line for the training session: $(cat "$work/serve.log")"
    fi
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    ;;
  tune)
    # The autotune cache in a directory of the test's own: list, a line that does not parse
    # skipped, clear, KILN_AUTOTUNE=0 said, a bad action refused.
    export XDG_CACHE_HOME=$work/cache
    expect 0 "0 choices" -- tune list
    mkdir -p "$work/cache/kiln"
    printf 'matmul f32 m 64 | sm_90\t0a0b\t12.5\t10\nnot a line\n' >"$work/cache/kiln/autotune.tsv"
    expect 0 "1 choice" -- tune list
    grep -qF "matmul f32 m 64 | sm_90" "$work/out" || fail "tune list lacks the key: $(cat "$work/out")"
    grep -qF "measured faster: 10.0 us (heuristic 12.5 us)" "$work/out" ||
      fail "tune list lacks the times: $(cat "$work/out")"
    KILN_AUTOTUNE=0 expect 0 "KILN_AUTOTUNE=0: not used" -- tune list
    expect 0 "forgot 1 choice" -- tune clear
    [ -e "$work/cache/kiln/autotune.tsv" ] && fail "tune clear left the file"
    expect 0 "0 choices" -- tune list
    expect 1 "tune-action: bogus not in {list,clear}" -- tune bogus
    expect 1 "tune-action is required" -- tune
    ;;
  launch)
    # Each rank's environment and its prefixed output; the store directory is gone afterwards.
    # shellcheck disable=SC2016
    expect 0 "[rank 1] rank 1 of 2" -- launch --nproc 2 -- \
      sh -c 'echo "rank $KILN_RANK of $KILN_WORLD_SIZE, local $KILN_LOCAL_RANK"; echo "store $KILN_STORE"'
    grep -qF "[rank 0] rank 0 of 2, local 0" "$work/out" || fail "launch: rank 0's line: $(cat "$work/out")"
    store=$(sed -n 's/^\[rank 0\] store //p' "$work/out")
    { [ -n "$store" ] && [ ! -e "$store" ]; } || fail "launch: the store '$store' was left behind"
    # A failing rank stops the others (rank 0 would sleep a minute) and fails the launch.
    start=$SECONDS
    # shellcheck disable=SC2016
    expect 1 "kiln: [launch] rank 1 of 2 exited with status 3; the other ranks were stopped" -- \
      launch --nproc 2 -- sh -c '[ "$KILN_RANK" = 1 ] && exit 3; exec sleep 60'
    [ $((SECONDS - start)) -lt 30 ] || fail "launch: the other rank was not stopped"
    expect 1 "[launch] cannot run no-such-kiln-program" -- launch --nproc 2 -- no-such-kiln-program
    expect 1 "--nproc" -- launch --nproc 0 -- true
    expect 1 "--nproc" -- launch -- true
    # The cores shared out among the ranks, unless OMP_NUM_THREADS says otherwise.
    # shellcheck disable=SC2016
    env -u OMP_NUM_THREADS "$kiln" launch --nproc 2 -- sh -c 'echo "threads $OMP_NUM_THREADS"' >"$work/out"
    grep -qE '^\[rank 1\] threads [1-9][0-9]*$' "$work/out" || fail "launch: OMP_NUM_THREADS: $(cat "$work/out")"
    # shellcheck disable=SC2016
    OMP_NUM_THREADS=3 "$kiln" launch --nproc 2 -- sh -c 'echo "threads $OMP_NUM_THREADS"' >"$work/out"
    grep -qF '[rank 0] threads 3' "$work/out" || fail "launch: OMP_NUM_THREADS=3: $(cat "$work/out")"
    ;;
  launch_digits)
    # Data-parallel training over Gloo: rank 0 prints, with the world size.
    expect 0 "[rank 0] world size 2: 16 images of every batch of 32 per rank" -- \
      launch --nproc 2 -- kiln train digits --epochs 2 --out "$work/digits"
    grep -qF "[rank 0] data parallel: 2 ranks (gloo)" "$work/out" || fail "launch: no data parallel line"
    grep -qF "[rank 0] test accuracy" "$work/out" || fail "launch: no test accuracy"
    if grep -q '^\[rank 1\]' "$work/out"; then fail "launch: rank 1 printed: $(cat "$work/out")"; fi
    [ -f "$work/digits/log.csv" ] || fail "launch: rank 0 wrote no log"
    ;;
  fusion_bisect)
    chains=$3
    # bisect STATUS TEXT ARGS...: kiln fusion-bisect ARGS; checks the status and TEXT in stdout.
    bisect() {
      local status=$1 text=$2
      shift 2
      "$kiln" fusion-bisect "$@" >"$work/out" 2>"$work/err"
      local got=$?
      if [ "$got" -ne "$status" ]; then
        fail "fusion-bisect $* exited $got, expected $status; stdout: $(cat "$work/out"); stderr: $(cat "$work/err")"
      elif ! grep -qF -- "$text" "$work/out"; then
        fail "fusion-bisect $*: stdout lacks '$text': $(cat "$work/out")"
      fi
    }
    # The program's 8 reads run 8 groups, all fused, and none changes the output.
    bisect 0 "no fused group changes the output (8 groups ran fused)" -- "$chains"
    # A fault in one group: bisect names it and prints it, for the first, a middle and the last.
    for group in 0 3 7; do
      KILN_FUSION_FAULT_FOR_TESTS=$group bisect 1 \
        "first fused group that changes the output: #$group" -- "$chains"
      grep -qF "kiln fusion: group #$group (structure hash " "$work/out" ||
        fail "group $group is not described: $(cat "$work/out")"
      grep -qF "fused alone (KILN_FUSION_ONLY=$group), it changes the output" "$work/out" ||
        fail "group $group alone is not confirmed: $(cat "$work/out")"
    done
    grep -qF "= sum_dim(" "$work/out" || fail "group 7 is not the reduction: $(cat "$work/out")"
    # A fault past the last group changes nothing; a tolerance wider than the fault hides it.
    KILN_FUSION_FAULT_FOR_TESTS=8 bisect 0 "no fused group changes the output" -- "$chains"
    KILN_FUSION_FAULT_FOR_TESTS=3 bisect 0 "no fused group changes the output" \
      --tolerance 10 -- "$chains"
    # Numbers compare within the tolerance, the rest of the text exactly. A shell stands in for a
    # program whose fused groups change its output; it writes no group count, so bisect searches
    # upwards first.
    numbers='[ "$KILN_FUSION_LIMIT" = 0 ] && echo "loss 1.00000, v1.2" || echo "loss 1.00001, v1.2"'
    bisect 0 "no fused group changes the output" -- bash -c "$numbers"
    bisect 1 "first fused group that changes the output: #0" --tolerance 1e-6 -- bash -c "$numbers"
    grep -qF "wrote no group count" "$work/out" || fail "no upward search: $(cat "$work/out")"
    text='[ "$KILN_FUSION_LIMIT" = 0 ] && echo "x 1 v1.2" || echo "x 1 v1.3"'
    bisect 1 "first fused group that changes the output: #0" --tolerance 1 -- bash -c "$text"
    # The fusion checker catches the same fault in the program itself.
    KILN_FUSION_CHECK=1 KILN_FUSION_FAULT_FOR_TESTS=3 "$chains" >"$work/out" 2>"$work/err" &&
      fail "the checker let the fault in group 3 through"
    grep -qF "[fusion] v" "$work/err" && grep -qF "differs at element 0" "$work/err" ||
      fail "the checker's message: $(cat "$work/err")"
    KILN_FUSION_CHECK=1 "$chains" >"$work/out" 2>"$work/err" ||
      fail "the checker failed without a fault: $(cat "$work/err")"
    # The group controls alone: every group step by step, or one group described.
    KILN_FUSION_LIMIT=0 KILN_FUSION_FAULT_FOR_TESTS=2 "$chains" >"$work/limited" 2>&1 ||
      fail "KILN_FUSION_LIMIT=0 run failed: $(cat "$work/limited")"
    KILN_FUSION=0 "$chains" >"$work/unfused" 2>&1
    # The first line names the device: fusion<cpu> against cpu.
    cmp -s <(tail -n +2 "$work/limited") <(tail -n +2 "$work/unfused") ||
      fail "KILN_FUSION_LIMIT=0 still ran group 2 fused: $(cat "$work/limited")"
    KILN_FUSION_DESCRIBE=1 "$chains" >/dev/null 2>"$work/err"
    grep -qF "kiln fusion: group #1 (structure hash " "$work/err" &&
      grep -qF "kiln fusion: end of group #1" "$work/err" ||
      fail "KILN_FUSION_DESCRIBE=1 printed: $(cat "$work/err")"
    KILN_FUSION_DESCRIBE=all "$chains" >/dev/null 2>"$work/err"
    [ "$(grep -c "^kiln fusion: end of group #" "$work/err")" -eq \
      "$(grep -c "^kiln fusion: group #" "$work/err")" ] &&
      grep -qF "kiln fusion: end of group #0" "$work/err" &&
      grep -qF "kiln fusion: end of group #2" "$work/err" ||
      fail "KILN_FUSION_DESCRIBE=all printed: $(cat "$work/err")"
    KILN_FUSION_DESCRIBE=al "$chains" >/dev/null 2>"$work/err" && fail "KILN_FUSION_DESCRIBE=al accepted"
    KILN_FUSION_LIMIT=x "$chains" >/dev/null 2>"$work/err" && fail "KILN_FUSION_LIMIT=x accepted"
    grep -qF "[KILN_FUSION_LIMIT] expected a group number" "$work/err" ||
      fail "KILN_FUSION_LIMIT=x: $(cat "$work/err")"
    # Errors exit 2 with one line: no command, one that fails, one that is not there, one whose
    # output varies.
    bisect_error() {
      local text=$1
      shift
      "$kiln" fusion-bisect "$@" >"$work/out" 2>"$work/err"
      local got=$?
      [ "$got" -eq 2 ] || fail "fusion-bisect $* exited $got, expected 2: $(cat "$work/err")"
      [ "$(wc -l <"$work/err")" -eq 1 ] || fail "fusion-bisect $*: stderr not one line: $(cat "$work/err")"
      grep -qF -- "$text" "$work/err" || fail "fusion-bisect $*: stderr lacks '$text': $(cat "$work/err")"
    }
    bisect_error "kiln: " --
    bisect_error "kiln: " --tolerance abc -- "$chains"
    bisect_error "--tolerance must be at least 0, got -1" --tolerance -1 -- "$chains"
    bisect_error "[fusion-bisect] false failed with every group step by step (exit status 1)" -- false
    bisect_error "[fusion-bisect] cannot run $work/none: No such file or directory" -- "$work/none"
    bisect_error "is not deterministic" -- bash -c 'echo $RANDOM$RANDOM'
    ;;
  *)
    fail "unknown scenario $scenario"
    ;;
esac
exit $((failures > 0))
