#!/bin/sh
# ui_test.sh - the front end driven through tmux as a learner would: keys in, captured screen
# out (LANG=C.UTF-8, 120x40). Home and reader, a gated collective cheatsheet stepped to the
# end of its all-reduce, the log view, replay, help, resizing and tiny terminals, NO_COLOR,
# --ascii, a rank killed mid-run, Ctrl-C and SIGTERM (terminal sane, no process left).
# Usage: tests/ui/ui_test.sh [BUILD_DIR]   (from the repository root; default build)
# Ends with "N passed, M failed"; without tmux it says why and skips.
set -u
build=${1:-build}
root=$(pwd)
bin="$root/$build/mlsys-lab"
if ! command -v tmux >/dev/null 2>&1; then
    echo "skip: tmux is not installed (apt-get install tmux); the UI tests did not run"
    echo "0 passed, 0 failed (skipped)"
    exit 0
fi
if [ ! -x "$bin" ]; then
    echo "FAIL: $bin is missing (make BUILD=$build first)"
    echo "0 passed, 1 failed"
    exit 1
fi
tmp=$(mktemp -d /tmp/mlsys-ui-test.XXXXXX)
T="tmux -S $tmp/sock -f /dev/null"
pass=0
fail=0
sess=""
cleanup() {
    $T kill-server 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# A shell in a 120x40 (or given) pane with a known environment; the lab starts from it.
start() {
    sess=$1
    w=${2:-120}
    h=${3:-40}
    extra=${4:-}
    mkdir -p "$tmp/home" "$tmp/state"
    $T new-session -d -s "$sess" -x "$w" -y "$h" \
        "env -i PATH=$PATH HOME=$tmp/home LANG=C.UTF-8 TERM=tmux-256color \
         XDG_STATE_HOME=$tmp/state XDG_DATA_HOME=$tmp/data MLSYS_LAB_SRC=$root $extra \
         PS1='$ ' sh"
    $T set-option -t "$sess" -g default-terminal tmux-256color >/dev/null 2>&1
    sleep 0.3
}

screen() { $T capture-pane -p -t "$sess"; }
keys() { $T send-keys -t "$sess" "$@"; }
# Wait until the screen matches (grep -E), up to $2 tenths of a second (default 60).
wait_for() {
    i=0
    while [ "$i" -lt "${2:-60}" ]; do
        screen | grep -Eq -- "$1" && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
# How many times a fixed string appears on the screen; wait until it is exactly $2 times.
count() { screen | grep -oF -- "$1" | wc -l | tr -d ' '; }
wait_count() {
    i=0
    while [ "$i" -lt "${3:-60}" ]; do
        [ "$(count "$1")" -eq "$2" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

check() {
    desc=$1
    shift
    if "$@"; then
        pass=$((pass + 1))
        echo "ok   $desc"
    else
        fail=$((fail + 1))
        echo "FAIL $desc"
        screen | sed 's/^/   | /'
    fi
}
eq() { [ "$1" = "$2" ]; }

# The PIDs of the lab (child of the pane's shell) and of its ranks.
ui_pid() { pgrep -P "$($T display -p -t "$sess" '#{pane_pid}')" | head -1; }
rank_pid() {
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then
            echo "$p"
            return
        fi
    done
}
sane_tty() {
    # the line typed shows $((6*7)), the output 42: the wait cannot match the command
    keys "stty -a | tr ' ;' '\n\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '; echo \$((6*7))" Enter
    wait_for "(icanon|echo) 42$" 30 && screen | grep -q "^icanon echo 42$"
}
no_ranks_left() {
    for p in $*; do
        kill -0 "$p" 2>/dev/null && return 1
    done
    return 0
}

# Go from home to the cheatsheet's form, set all_reduce, optionally gated, and launch.
launch_cheatsheet() {
    keys 3 Right j Enter
    wait_for "launch ch03/collective-cheatsheet" 30 || return 1
    keys C-u all_reduce
    if [ "${1:-}" = gated ]; then
        # gated is the last field of the form: Up from the first field wraps to Launch
        keys Up Up Space
    fi
    keys Enter
}

# ---- home, tree and reader ----
start home
keys "$bin; echo EXIT=\$?" Enter
check "home opens with the chapter tree and chapter 1's text" \
    wait_for "Chapter 1: Your first distributed program"
check "the tree has four parts" eq "$(screen | grep -cE '^Part (I|II|III|IV):')" 4
check "the tree has fourteen chapters" eq "$(screen | grep -cE '^ [▸▾] +[0-9]+ ')" 14
keys 3
check "3 jumps to chapter 3 and shows its text" wait_for "Chapter 3: Collective operations" 30
keys Enter
check "Enter opens chapter 3: its labs with progress marks" \
    wait_for "lab collective-cheatsheet +·" 30
keys / r i n g Enter
check "/ searches the chapter" wait_for "/ring: match [0-9]+ of [0-9]+" 30
keys n
check "n goes to the next match" wait_for "/ring: match 2 of" 30
keys '?'
check "? opens the help overlay with the keys of this screen" wait_for "help: .*chapters" 20
keys x
check "any key closes the help" sh -c "! $T capture-pane -p -t $sess | grep -q 'any key closes'"
missing=$("$bin" list | grep -m1 "text not written yet" | sed -E 's/^ *Chapter +([0-9]+).*/\1/')
if [ -n "$missing" ]; then
    keys $(echo "$missing" | sed 's/./& /g')
    check "a chapter without text says so plainly (chapter $missing)" \
        wait_for "The text of this chapter is not written yet" 30
else
    echo "skip a chapter without text: every chapter has one now"
fi
keys q
check "q on home quits, exit status 0" wait_for "^EXIT=0" 30
check "the terminal is sane after quitting" sane_tty
$T kill-session -t "$sess"

# ---- a gated collective cheatsheet, stepped through its all-reduce ----
start gated
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
launch_cheatsheet gated
check "the gated job starts with every rank at the gate" \
    wait_for "the ranks wait at step 0: n lets them take it" 60
check "all four ranks are drawn" eq "$(count '⏸ gate 0')" 4
keys n
check "step: the ranks print their inputs and enter recursive doubling" \
    wait_for "algorithm recursive_doubling" 60
check "the rule that chose it is shown" wait_for "why: < 64 KiB: recursive_doubling" 30
inputs_shown() { wait_count "= 1.0 2.0" 1 && wait_count "= 4.0 8.0" 1; }
pairs_shown() { wait_count "0+1   0+1" 2 && wait_count "2+3   2+3" 2; }
check "each rank shows its real input (printed)" inputs_shown
keys n
check "after exchange step 0 the cells hold pairs 0+1 and 2+3" pairs_shown
check "the job really waits at the next step" wait_for "wait at step 1" 40
keys n
check "after the last all-reduce step every rank holds all contributions" \
    wait_count "all   all" 4
check "and every rank's cells show the right sums 10.0 and 20.0" wait_count "= 10.0 20.0" 4
check "no message was left unplaced" sh -c "! $T capture-pane -p -t $sess | grep -q 'rank [0-9] ≈'"
check "bytes per link count the exchange (8 B each way on 0-1)" \
    sh -c "$T capture-pane -p -t $sess | grep -Eq '^.*│ 0 +· +8 +8 '"
for i in 1 2 3 4 5 6; do keys n; sleep 0.3; done
check "stepping on, the job finishes" wait_for "finished: every rank exited 0" 60
keys + + + + + +
keys 2
check "the log view shows every rank's output" wait_for "Rank 3: \\[10.0, 20.0\\]" 60
keys o
check "o puts the log in rank order" wait_for "output in rank order" 20
keys 1
keys q
check "q goes back to the form" wait_for "launch ch03/collective-cheatsheet" 30
keys Escape
check "the lab is marked as run in the tree" wait_for "lab collective-cheatsheet +✓" 30

# ---- resizing ----
keys Enter Enter
wait_for "algorithm" 60
$T resize-window -t "$sess" -x 100 -y 30
check "resizing to 100x30 redraws to fit (footer on the last line)" \
    sh -c "sleep 0.5; $T capture-pane -p -t $sess | tail -1 | grep -q 'q back' && \
           [ \$($T capture-pane -p -t $sess | wc -l) -eq 30 ]"
check "the ranks are still drawn at 100x30" wait_for "rank 3" 20
$T resize-window -t "$sess" -x 60 -y 20
check "a terminal smaller than 80x24 gets a clear message" \
    wait_for "needs a terminal of at least 80x24" 30
check "which names the size it has" wait_for "this one is 60x20" 10
$T resize-window -t "$sess" -x 120 -y 40
check "back at 120x40 the view returns" wait_for "rank 0" 30
keys q Escape q
check "quitting from the views leaves status 0" wait_for "^EXIT=0" 40
check "the terminal is sane" sane_tty
$T kill-session -t "$sess"

# ---- starting in a tiny terminal ----
start tiny 60 20
keys "$bin; echo EXIT=\$?" Enter
check "starting in 60x20 says what it needs" wait_for "at least 80x24" 30
keys q
check "q quits from the size notice" wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

# ---- colours: NO_COLOR, --no-color, and the control case with colours ----
start colors
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "with colours the screen has colour codes (control)" \
    sh -c "$T capture-pane -e -p -t $sess | grep -Eq '\[(3[0-7]|38;5;[0-9]+)(;|m)'"
keys q
wait_for "^EXIT=0" 30
keys "NO_COLOR=1 $bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "NO_COLOR=1: no colour codes at all" \
    sh -c "! $T capture-pane -e -p -t $sess | grep -Eq '\[(3[0-7]|38;5;[0-9]+|4[0-7]|48;5;[0-9]+)(;|m)'"
check "NO_COLOR=1 keeps the selection visible (reverse video)" \
    sh -c "$T capture-pane -e -p -t $sess | grep -q '\[7m'"
keys q
wait_for "^EXIT=0" 30
keys "$bin --no-color; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "--no-color: no colour codes either" \
    sh -c "! $T capture-pane -e -p -t $sess | grep -Eq '\[(3[0-7]|38;5;[0-9]+|4[0-7]|48;5;[0-9]+)(;|m)'"
keys q
wait_for "^EXIT=0" 30
keys "clear; $bin --ascii; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "--ascii: only ASCII on the screen" \
    sh -c "! $T capture-pane -p -t $sess | LC_ALL=C grep -q '[^ -~]'"
keys q
wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

# ---- a rank killed mid-run ----
start kill
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
launch_cheatsheet gated
wait_for "the ranks wait at step 0" 60
ui=$(ui_pid)
r2=$(rank_pid "$ui" 2)
ranks=$(pgrep -P "$ui" | tr '\n' ' ')
check "the ranks run as children of the lab (rank 2 found)" test -n "$r2"
# SIGKILL: a sanitizer build would turn SIGSEGV into an exit status
[ -n "$r2" ] && kill -KILL "$r2"
check "the screen says which rank failed and how" \
    wait_for "rank 2 died by signal 9 \\(Killed\\)" 60
check "rank 2's box is marked" wait_for "rank 2 .*✗ killed" 20
check "no rank is left running" sh -c "sleep 1; for p in $ranks; do kill -0 \$p 2>/dev/null && exit 1; done; exit 0"
keys r
check "r reruns the job after the failure: fresh ranks at the gate" \
    wait_for "the ranks wait at step 0: n lets them take it" 60
check "the new ranks are new processes" sh -c "[ -z \"\$(pgrep -P $ui | grep -x '$r2')\" ] && \
    [ \$(pgrep -P $ui | wc -l) -eq 4 ]"
keys q Escape q
check "quitting after the failure leaves status 0" wait_for "^EXIT=0" 40
check "the terminal is sane after a rank crash" sane_tty
$T kill-session -t "$sess"

# ---- Ctrl-C and SIGTERM while a job runs ----
for how in ctrl-c sigterm; do
    start "$how"
    keys "$bin; echo EXIT=\$?" Enter
    wait_for "Chapter 1:" 30
    launch_cheatsheet gated
    wait_for "the ranks wait at step 0" 60
    ui=$(ui_pid)
    ranks=$(pgrep -P "$ui" | tr '\n' ' ')
    if [ "$how" = ctrl-c ]; then keys C-c; else kill -TERM "$ui"; fi
    check "$how: the lab stops the job and exits 130" wait_for "^EXIT=130" 60
    check "$how: no rank is left" sh -c "sleep 0.5; for p in $ranks; do kill -0 \$p 2>/dev/null && exit 1; done; exit 0"
    check "$how: the terminal is sane" sane_tty
    $T kill-session -t "$sess"
done

# ---- replay of a trace written headless ----
"$bin" run ch03/collective-cheatsheet --operation all_reduce --trace "$tmp/t.json" \
    >/dev/null 2>&1
start replay
keys "$bin replay $tmp/t.json; echo EXIT=\$?" Enter
check "replay opens the trace in the ring view" wait_for "replay t.json" 30
keys + + + + + +
check "replay plays the all-reduce: every rank ends with all contributions" \
    wait_count "all   all" 4 120
check "with the algorithm that ran, in the calls so far" wait_for "all_reduce recursive_doubling" 20
check "and no message it could not place" sh -c "! $T capture-pane -p -t $sess | grep -q 'rank [0-9] ≈'"
keys q
check "q ends the replay" wait_for "^EXIT=0" 30
keys "$bin replay /nonexistent.json; echo EXIT=\$?" Enter
check "a missing trace is a clear error" wait_for "cannot open /nonexistent.json" 30
$T kill-session -t "$sess"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
