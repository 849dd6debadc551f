#!/bin/sh
# phalanx-sim's command line: a fixed seed reproduces the CSV byte for byte
# (every policy), another seed changes it, bad flags and values exit 2 with
# a message naming them, --help exits 0, spares need promotion_s (the
# checked-in figures hold it).
#   sh tests/sim/test_sim_cli.sh BUILD/bin/phalanx-sim bench/sim_figures.json
set -u
sim=$1 figs=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0
no() { echo "FAIL: $*" >&2; fail=1; }

for p in restart-all drop-group-timeout phalanx-sync phalanx-diloco; do
    args="--accelerators 4096 --policy $p --figures $figs --node-failure-share 0.2 --wall-days 60"
    "$sim" $args --seed 7 --csv "$dir/a.csv" >/dev/null || no "$p: exit $?"
    "$sim" $args --seed 7 --csv "$dir/b.csv" >/dev/null || no "$p: exit $?"
    "$sim" $args --seed 8 --csv "$dir/c.csv" >/dev/null || no "$p: exit $?"
    cmp -s "$dir/a.csv" "$dir/b.csv" || no "$p: seed 7 twice gave two CSVs"
    cmp -s "$dir/a.csv" "$dir/c.csv" && no "$p: seeds 7 and 8 gave the same CSV"
    [ "$(wc -l <"$dir/a.csv")" -eq 2 ] || no "$p: the CSV is not a header and one row"
done

# expect STATUS PATTERN ARGS...: exit status and a message on stderr matching PATTERN
expect() {
    want=$1 pat=$2
    shift 2
    "$sim" "$@" >"$dir/out" 2>"$dir/err"
    rc=$?
    [ "$rc" -eq "$want" ] || no "'$*': exit $rc, want $want"
    grep -q -- "$pat" "$dir/err" "$dir/out" || no "'$*': no '$pat' in: $(cat "$dir/err")"
}
expect 0 "drop-group-timeout" --help
expect 2 "unknown flag '--bogus'" --accelerators 8 --policy restart-all --bogus 1
expect 2 "unknown flag '--bogus'" --accelerators 8 --policy restart-all --bogus
expect 2 "policy 'torchrun'" --accelerators 8 --policy torchrun
expect 2 "accelerators" --accelerators 0 --policy phalanx-sync
expect 2 "node-failure-share" --accelerators 8 --policy phalanx-sync --node-failure-share 2
expect 2 "multiple of gpus_per_group" --accelerators 12 --policy phalanx-sync --figures "$figs"
expect 2 "is not given (a --figures file" --accelerators 8 --policy phalanx-sync
expect 2 "--accelerators is required" --policy phalanx-sync
echo '{"detect_s": 1, "typo_s": 2}' >"$dir/bad.json"
expect 2 "unknown key 'typo_s'" --accelerators 8 --policy phalanx-sync --figures "$dir/bad.json"
expect 2 "cannot read figures" --accelerators 8 --policy phalanx-sync --figures "$dir/none.json"
# spares: phalanx-sync needs promotion_s (the checked-in file has it; a flag gives it too)
"$sim" --accelerators 4096 --gpus-per-group 512 --policy phalanx-sync --figures "$figs" --spares 1 >/dev/null ||
    no "phalanx-sync --spares 1 with $figs: exit $? (no promotion_s in it?)"
echo '{"detect_s": 0.01, "requorum_s": 0.02, "heal_bytes_per_s": 1e9, "checkpoint_write_bytes_per_s": 1e9,
       "checkpoint_hold_bytes_per_s": 1e10}' >"$dir/nopromo.json"
expect 2 "promotion_s is not given" --accelerators 64 --policy phalanx-sync --figures "$dir/nopromo.json" --spares 1
expect 0 "promoted" --accelerators 64 --policy phalanx-sync --figures "$dir/nopromo.json" --spares 1 --promotion-s 0.1
# a figure flag overrides the file whatever the order
"$sim" --detect-s 100 --accelerators 4096 --policy phalanx-sync --figures "$figs" --csv "$dir/o.csv" >/dev/null
"$sim" --accelerators 4096 --policy phalanx-sync --figures "$figs" --csv "$dir/f.csv" >/dev/null
cmp -s "$dir/o.csv" "$dir/f.csv" && no "--detect-s before --figures was overridden by the file"
exit $fail
