#!/bin/sh
# ui_test.sh - the front end driven through tmux as a learner would: keys in, captured screen
# out (LANG=C.UTF-8, 120x40). Home and reader, the exercise pane (hints, a failing and a
# passing check, $EDITOR, predict answers, Ctrl-C during a check), a gated collective
# cheatsheet stepped to the end of its all-reduce, the log view, replay, help, resizing and
# tiny terminals, NO_COLOR, --ascii, a rank killed mid-run, Ctrl-C and SIGTERM (terminal
# sane, no process left); at 80x24 the keys (q back / quit, Q asks while a job runs, a help
# that scrolls), log lines under their own rank, algorithm fallbacks said in the form, the
# run screen and headless stderr, the chain relay one hop per step, one glyph per meaning, and
# the serving engine (ch09 gated: the block map and the queue; ch08 at 80x24). Every file the
# lab writes (workspace, progress) stays in a temp dir.
# MLSYS_EX_SEED (test-only, read by lab/ui/expane.c) fixes the seeds of the pane's checks and
# questions so that its golden frame (tests/frames/ui_expane_*.txt) is the same every run.
# Usage: tests/ui/ui_test.sh [BUILD_DIR]   (from the repository root; default build)
# GENERATE=1 rewrites the golden frames. Ends with "N passed, M failed"; without tmux it
# says why and skips.
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
         XDG_STATE_HOME=$tmp/state XDG_DATA_HOME=$tmp/data MLSYS_LAB_HOME=$tmp/lab \
         MLSYS_LAB_SRC=$root $extra \
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

# Move the launcher form's selection down to the field called $1 (at most 40 presses), so
# that a new field elsewhere in the form does not shift what a test types into.
to_field() {
    i=0
    while [ "$i" -lt 40 ]; do
        screen | grep -Eq "^ +(▸|>) +$1 " && return 0
        keys Down
        sleep 0.05
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

# The right-hand pane of home (rows 2-39 without the tree's 46 columns), and as one line.
pane() { screen | sed -n '2,39p' | sed -E 's/^.{0,46}//'; }
pane_text() { pane | tr '\n' ' ' | tr -s ' '; }
# Press $2 (j or k) until the pane shows exercise $1, at most 30 times.
select_ex() {
    i=0
    while [ "$i" -lt 30 ]; do
        screen | grep -Eq "│ exercise $1( |\$)" && return 0
        keys "$2"
        sleep 0.15
        i=$((i + 1))
    done
    return 1
}
# Compare the pane and the footer with tests/frames/$1.txt, the temp dir's name written as
# XXXXXX (the same length, so that lines wrap the same); GENERATE=1 writes the golden.
golden() {
    want="$root/tests/frames/$1.txt"
    { pane; screen | sed -n '40p'; } | sed -e 's/[[:space:]]*$//' \
        -e "s|mlsys-ui-test\.[A-Za-z0-9]\{6\}|mlsys-ui-test.XXXXXX|g" > "$tmp/$1.txt"
    if [ "${GENERATE:-}" = 1 ]; then
        cp "$tmp/$1.txt" "$want"
        echo "   wrote $want"
        return 0
    fi
    [ -f "$want" ] || { echo "   | golden $want is missing (GENERATE=1 writes it)"; return 1; }
    diff -u "$want" "$tmp/$1.txt" | sed 's/^/   | /' | head -40
    cmp -s "$want" "$tmp/$1.txt"
}

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
    # the search left the focus in the reader, where q goes back to the chapter tree
    keys q
    check "q in the reader goes back to the chapter tree" wait_for "1-14 chapter .* q quit" 30
fi
keys q
check "q on home quits, exit status 0" wait_for "^EXIT=0" 30
check "the terminal is sane after quitting" sane_tty
$T kill-session -t "$sess"

# ---- the exercise pane: hints, a failing check, $EDITOR, a passing check, predict ----
# A stand-in for $EDITOR that writes the reference solution over the learner's file. It also
# presses Ctrl-C as a learner in vi might: SIGINT to its whole process group, the lab's too
# (the lab must ignore it while the editor has the terminal); it ignores it itself.
printf '#!/bin/sh\ntrap "" INT\nkill -INT 0\n%s\ncp "%s" "$1"\n' \
    'echo "stand-in editor: the solution goes into $1"' \
    "$root/assets/exercises/ch03-ring-allreduce/solution.c" > "$tmp/editor.sh"
chmod +x "$tmp/editor.sh"
work="$tmp/exhome/exercises/ch03-ring-allreduce/ring_allreduce.c"
progress="$tmp/exhome/progress"            # MLSYS_LAB_HOME holds the state too
start expane 120 40 "XDG_STATE_HOME=$tmp/exstate MLSYS_LAB_HOME=$tmp/exhome \
    EDITOR=$tmp/editor.sh MLSYS_EX_SEED=7"
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 3 Enter
wait_for "ex  Ring all-reduce" 30
check "selecting the ring all-reduce exercise opens its pane" select_ex ch03-ring-allreduce j
pane_has() { pane_text | grep -qF -- "$1"; }
check "the pane shows its title" pane_has "Ring all-reduce from send and recv"
check "its kind and chapter" pane_has "implement · chapter 3 · builds on the lab"
check "its task" pane_has "Write an in-place SUM all-reduce with point-to-point calls only"
check "and the learner's file, in the temp workspace" \
    sh -c "$T capture-pane -p -t $sess | grep -qF '$tmp/exhome/exercises/ch03-ring-allreduce/' && \
           $T capture-pane -p -t $sess | grep -qF ' ring_allreduce.c'"
check "which is not there until e or c makes it" sh -c "[ ! -e '$work' ] && \
    $T capture-pane -p -t $sess | grep -q 'not there yet: e or c makes it from the starter'"
check "no hint is shown before h" pane_has "Hints 0 of 5 shown"
check "the footer has the pane's keys" wait_for "e edit  c check  t hint" 10
keys t
check "t shows the first hint" wait_for "1\. If every rank calls a blocking mlsys_send" 20
keys t
check "t again shows the second, one at a time" wait_for "2\. How do you cut count elements" 20
check "and not the third yet" \
    sh -c "! $T capture-pane -p -t $sess | grep -q '3\. At reduce-scatter'"
check "the hints shown are kept in the progress file" \
    grep -q "^ch03-ring-allreduce pending hints=2" "$progress"
keys c
check "c on the untouched starter shows a failing verdict" wait_for "✗ FAIL  wrong result" 200
check "with the rank and element that differ" \
    wait_for "differs at  N = [0-9]+, rank [0-9]+, element [0-9]+" 10
check "and what was expected there" wait_for "rank [0-9]+, element [0-9]+: expected .*, got " 10
check "c made the file from the starter in the temp workspace" \
    cmp -s "$root/assets/exercises/ch03-ring-allreduce/starter.c" "$work"
check "the tree marks the exercise failed" wait_for "ex  Ring all-reduce from send and … ✗" 20
check "golden frame of the pane after two hints and a failed check" golden ui_expane_ring_fail
keys e
check "e runs \$EDITOR on the file and comes back to the pane" \
    wait_for "back from $tmp/editor.sh: c checks your file" 50
check "a Ctrl-C in the editor went to the editor, not the lab" sh -c "[ -n \"\$(pgrep -P \
    \$($T display -p -t $sess '#{pane_pid}'))\" ]"
check "the screen is drawn whole again: title on top, footer at the bottom" \
    sh -c "$T capture-pane -p -t $sess | head -1 | grep -q '^ MLSys Lab' && \
           $T capture-pane -p -t $sess | tail -1 | grep -q 'e edit  c check' && \
           ! $T capture-pane -p -t $sess | grep -q 'stand-in editor'"
check "the old verdict is marked as older than the edit" wait_for "checked before your last edit" 10
check "the editor wrote the solution into the learner's file" \
    cmp -s "$root/assets/exercises/ch03-ring-allreduce/solution.c" "$work"
keys c
check "c on the solution passes" wait_for "✓ PASS" 300
check "on every world size" wait_for "passed on N = 1, 2, 3, 4, 8" 10
check "and the tree mark becomes ✓" wait_for "ex  Ring all-reduce from send and … ✓" 20
check "the progress file says done" grep -q "^ch03-ring-allreduce done hints=2" "$progress"

# A predict question: the right answer is worked out here from the question on the screen.
ring_sends_answer() {
    q=$(pane_text)
    n=$(echo "$q" | sed -nE 's/.*runs on N = ([0-9]+) ranks.*/\1/p')
    [ -n "$n" ] || return 1
    if echo "$q" | grep -q "sent in all"; then
        echo $((2 * n * (n - 1)))
    else
        echo $((2 * (n - 1)))
    fi
}
select_ex ch03-predict-ring-sends k
check "the predict question on ring messages shows its question" \
    wait_for "A ring all-reduce runs on N = [0-9]+ ranks" 10
check "and an empty answer field" wait_for "\[ +\]  Enter to answer" 10
ans=$(ring_sends_answer)
check "the question names N (the answer worked out from it: $ans)" test -n "$ans"
keys Enter
check "Enter opens the answer field" wait_for "Enter submits, Esc leaves the field" 10
keys "$ans" Enter
check "the right answer is judged right" wait_for "✓ right: $ans messages" 20
check "and the question is marked passed in the tree" \
    wait_for "ex  Messages in a ring all-reduce   ✓" 20
keys Enter
check "Enter draws a new question and opens the field" wait_for "\[ +\]  Enter submits" 10
ans=$(ring_sends_answer)
keys "$((ans + 1))" Enter
check "a wrong answer is judged wrong (too large)" \
    wait_for "✗ $((ans + 1)) is not it \(too large\)" 20
check "and the pane gives the right one" wait_for "the answer: $ans messages" 10
keys e
check "a predict question has no file to edit" wait_for "a predict question has no file" 10
select_ex ch03-predict-reduce-scatter k
keys Enter 0 Enter
check "a wrong first answer marks a question failed in the tree" \
    wait_for "ex  What reduce_scatter leaves on … ✗" 20
keys q
check "q quits from the exercise pane, exit status 0" wait_for "^EXIT=0" 30
check "the terminal is sane after the pane and the editor" sane_tty
$T kill-session -t "$sess"
XDG_STATE_HOME=$tmp/exstate MLSYS_LAB_HOME=$tmp/exhome "$bin" list > "$tmp/list.txt" 2>&1
check "mlsys-lab list shows the labs" grep -Eq '^ +lab +ch03/collective-cheatsheet ' "$tmp/list.txt"
check "and the exercises with kind and status" sh -c "\
    grep -Eq '^ +ex +ch03-ring-allreduce +implement +done ' $tmp/list.txt && \
    grep -Eq '^ +ex +ch03-predict-ring-sends +predict +done ' $tmp/list.txt && \
    grep -Eq '^ +ex +ch03-predict-reduce-scatter +predict +failed ' $tmp/list.txt && \
    grep -Eq '^ +ex +ch03-argmax +implement +not tried ' $tmp/list.txt"

# ---- no usable $EDITOR: vi, then nano, then ed; here only nano and ed are on the PATH ----
mkdir -p "$tmp/fakebin"
ln -sf "$(command -v sh)" "$tmp/fakebin/sh"
for ed in nano ed; do
    printf '#!/bin/sh\necho %s > "%s/editor-ran"\n' "$ed" "$tmp" > "$tmp/fakebin/$ed"
    chmod +x "$tmp/fakebin/$ed"
done
start exed 120 40 "PATH=$tmp/fakebin XDG_STATE_HOME=$tmp/edstate MLSYS_LAB_HOME=$tmp/edhome \
    EDITOR=nosuch-editor"
keys "$bin" Enter
wait_for "Chapter 1:" 30
keys 3 Enter
wait_for "ex  Ring all-reduce" 30
select_ex ch03-ring-allreduce j
check "with EDITOR not runnable and no vi the pane names the fallback, nano" \
    wait_for "e opens it in nano \(EDITOR=nosuch-editor cannot run here\)" 20
keys e
check "e runs nano, not ed" sh -c "for i in \$(seq 100); do \
    [ \"\$(cat $tmp/editor-ran 2>/dev/null)\" = nano ] && exit 0; sleep 0.1; done; exit 1"
check "and creates the file from the starter first" \
    cmp -s "$root/assets/exercises/ch03-ring-allreduce/starter.c" \
    "$tmp/edhome/exercises/ch03-ring-allreduce/ring_allreduce.c"
check "the pane says the file was made from the starter" \
    wait_for "back from nano \(your file was made from the starter\): c checks it" 20
keys q
$T kill-session -t "$sess"

# ---- Ctrl-C while a check runs: the check is stopped and the terminal given back ----
mkdir -p "$tmp/extmp"
printf '%s\n' '#include "mlsys.h"' '#include "api.h"' \
    'int my_ring_allreduce(mlsys_comm *c, float *buf, size_t count)' \
    '{' '    (void)c; (void)buf; (void)count;' '    for (volatile int spin = 0;; spin++)' \
    '        ;' '    return 0;' '}' > "$work"
start excc 120 40 "XDG_STATE_HOME=$tmp/exstate MLSYS_LAB_HOME=$tmp/exhome TMPDIR=$tmp/extmp"
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 3 Enter
wait_for "ex  Ring all-reduce" 30
select_ex ch03-ring-allreduce j
keys c
check "c on a function that never returns says it is checking" wait_for "⋯ checking…" 30
# [m]: the pattern does not match the command line of the sh that runs pgrep
check "while the ranks of the check run" sh -c "sleep 1; pgrep -f '$tmp/extmp/[m]lsys-ex-' >/dev/null"
keys C-c
check "Ctrl-C during the check stops it and exits 130" wait_for "^EXIT=130" 60
check "no process of the check is left" sh -c "sleep 0.5; ! pgrep -f '$tmp/extmp/[m]lsys-ex-' >/dev/null"
check "the terminal is sane after Ctrl-C in a check" sane_tty
$T kill-session -t "$sess"

# ---- a gated collective cheatsheet, stepped through its all-reduce ----
start gated
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
launch_cheatsheet gated
check "the gated job starts with every rank at the gate" \
    wait_for "the ranks wait at gate 1: n lets them take it" 60
check "all four ranks are drawn, each waiting" eq "$(count '⏸ waits')" 4
keys n
check "step: n shows the next step, the lab's own (no collective yet)" wait_for "step 1/2 " 60
pairs_shown() { wait_count "0+1      0+1" 2 && wait_count "2+3      2+3" 2; }
sums_shown() { wait_count "3.0      6.0" 2 && wait_count "7.0     14.0" 2; }
keys n
check "after exchange step 0 the cells hold pairs 0+1 and 2+3" pairs_shown
check "and their partial sums as values (ranks 0+1: 3.0 6.0)" sums_shown
check "the header names the algorithm of this very step" wait_for "algorithm recursive_doubling" 20
check "the rule that chose it is shown" wait_for "why: < 64 KiB: recursive_doubling" 30
check "the caption names the step and a message" \
    wait_for "all_reduce step 1 of 2 \\(exchange\\): rank . sends its whole buffer" 20
check "the job really waits at the next gate" wait_for "the ranks wait at gate 3" 40
keys b
check "b steps back while the job waits" wait_for "step 1/3" 20
keys n
keys n
check "after the last all-reduce step every rank holds all contributions" \
    wait_count "all      all" 4
check "and every rank's cells show the right sums 10.0 and 20.0" wait_count "10.0     20.0" 4
check "no message was left unplaced" sh -c "! $T capture-pane -p -t $sess | grep -q 'rank [0-9] ≈'"
check "the side panel counts the messages so far" wait_for "messages, " 10
for i in 1 2 3 4 5 6; do keys n; sleep 0.3; done
check "stepping on, the job finishes" wait_for "finished: every rank exited 0" 60
keys + + + + + +
keys 2
check "the log view shows every rank's output" wait_for "Rank 3: \\[10.0, 20.0\\]" 60
check "each line under the rank that printed it, not rank 0" \
    wait_for "^ \\[r3\\] Rank 3: \\[10.0, 20.0\\]" 20
keys f f f f f
check "f reaches every rank of the job: rank 3 alone" wait_for "showing rank 3" 20
check "and only rank 3's lines" sh -c "! $T capture-pane -p -t $sess | grep -q '^ \\[r[0-2]\\]'"
keys f
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
wait_for "the ranks wait at gate 1" 60
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
    wait_for "the ranks wait at gate 1: n lets them take it" 60
check "the new ranks are new processes" sh -c "[ -z \"\$(pgrep -P $ui | grep -x '$r2')\" ] && \
    [ \$(pgrep -P $ui | wc -l) -eq 4 ]"
ranks=$(pgrep -P "$ui" | tr '\n' ' ')
keys q
check "q while the job runs asks before it stops the ranks" \
    wait_for "Stop every rank and go back\\?" 20
keys n
check "n keeps the job at its gate" sh -c "sleep 0.3; $T capture-pane -p -t $sess | \
    grep -q 'wait at gate' && for p in $ranks; do kill -0 \$p || exit 1; done"
keys q y
check "q then y goes back to the form and stops every rank" sh -c "\
    $T capture-pane -p -t $sess | grep -q 'launch ch03/collective-cheatsheet' || sleep 1; \
    $T capture-pane -p -t $sess | grep -q 'launch ch03/collective-cheatsheet' && \
    sleep 0.5 && for p in $ranks; do kill -0 \$p 2>/dev/null && exit 1; done; exit 0"
keys Escape q
check "quitting after the failure leaves status 0" wait_for "^EXIT=0" 40
check "the terminal is sane after a rank crash" sane_tty
$T kill-session -t "$sess"

# ---- Ctrl-C and SIGTERM while a job runs ----
for how in ctrl-c sigterm; do
    start "$how"
    keys "$bin; echo EXIT=\$?" Enter
    wait_for "Chapter 1:" 30
    launch_cheatsheet gated
    wait_for "the ranks wait at gate 1" 60
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
back_to_allreduce_end() {
    wait_for "the end · " 120 || return 1
    for i in 1 2 3 4 5 6 7 8; do
        screen | grep -q "all_reduce step 2 of 2" && break
        keys b
        sleep 0.2
    done
    wait_count "all      all" 4 20
}
check "replay plays the all-reduce: every rank ends with all contributions" back_to_allreduce_end
check "with the algorithm that ran, in the calls so far" wait_for "all_reduce recursive_doubling" 20
check "and no message it could not place" sh -c "! $T capture-pane -p -t $sess | grep -q 'rank [0-9] ≈'"
check "the scrubber under the view says its keys" wait_for "step [0-9]+/[0-9]+ .*b/n Home/End" 10
keys 2 End
check "the replay's log has the ranks' output, each under its rank" \
    wait_for "^ \\[r3\\] Rank 3: \\[" 20
keys '?'
check "the replay's help offers no ranks to stop and no form to go back to" sh -c "sleep 0.3; \
    ! $T capture-pane -p -t $sess | grep -q -e 'stop every rank' -e 'gated on'"
keys Escape q
check "q ends the replay" wait_for "^EXIT=0" 30
keys "$bin replay /nonexistent.json; echo EXIT=\$?" Enter
check "a missing trace is a clear error" wait_for "cannot open /nonexistent.json" 30
$T kill-session -t "$sess"


# ---- keys as htop and lazygit users expect them, at 80x24 ----
start keys80 80 24
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "80x24 home: the footer keeps help and says q quits here" \
    sh -c "$T capture-pane -p -t $sess | tail -1 | grep -q '?/F1 help  q quit'"
keys Tab
check "in the reader q means back (to the tree)" \
    sh -c "sleep 0.3; $T capture-pane -p -t $sess | tail -1 | grep -q 'q back'"
keys q
check "q in the reader goes back to the tree, the lab still runs" \
    sh -c "sleep 0.3; $T capture-pane -p -t $sess | tail -1 | grep -q 'q quit' && \
           ! $T capture-pane -p -t $sess | grep -q '^EXIT='"
select_ex ch01-world-size-8 j
keys h
check "h on an exercise moves back to its chapter, it shows no hint" \
    sh -c "sleep 0.3; ! $T capture-pane -p -t $sess | grep -q 'hint 1 of'"
launch_cheatsheet gated
wait_for "the ranks wait at gate 1" 60
check "80x24 run screen: the footer keeps ?/F1 help and q back" \
    sh -c "$T capture-pane -p -t $sess | tail -1 | grep -q '?/F1 help  q back'"
keys '?'
check "the help says how to scroll it when it does not fit" wait_for "j/k scroll" 20
keys G
check "G scrolls the help to its last keys and lines" wait_for "Q/F10 +quit the lab" 20
keys Escape
keys 2 '?'
check "the log view's help lists its own keys (o, f/F, g/G)" \
    sh -c "sleep 0.3; $T capture-pane -p -t $sess | grep -q ' o  *rank order' && \
           $T capture-pane -p -t $sess | grep -q ' f/F  *next/previous rank' && \
           $T capture-pane -p -t $sess | grep -q ' g/G  *top/end'"
keys Escape 1
ui=$(ui_pid)
ranks=$(pgrep -P "$ui" | tr '\n' ' ')
keys Q
check "Q while a job runs asks first" wait_for "Quit MLSys Lab and stop every rank\\?" 20
keys n
check "n keeps the lab and its job" sh -c "sleep 0.3; ! $T capture-pane -p -t $sess | \
    grep -q 'Quit MLSys Lab' && $T capture-pane -p -t $sess | grep -q 'wait at gate'"
keys Q y
check "Q then y quits from the run screen, exit status 0" wait_for "^EXIT=0" 40
check "and no rank is left" sh -c "sleep 0.5; for p in $ranks; do kill -0 \$p 2>/dev/null && exit 1; done; exit 0"
check "the terminal is sane after Q" sane_tty
$T kill-session -t "$sess"

# ---- algorithms never change silently: the form, the run screen, headless stderr ----
"$bin" run ch03/collective-cheatsheet -w 5 --algo ring --trace "$tmp/ring5.json" \
    > "$tmp/ring5.out" 2> "$tmp/ring5.err"
check "headless: --algo ring on 5 ranks says on stderr which collectives have no ring" \
    grep -q "scatter (ran tree), gather (ran tree) have no ring algorithm" "$tmp/ring5.err"
check "headless: all_reduce gets one element per rank, so ring really runs" sh -c "\
    grep -q 'cuts the buffer into 5 chunks, as ring does, can run' '$tmp/ring5.out' && \
    ! grep -q 'all_reduce of' '$tmp/ring5.err'"
check "headless: stdout is the lab's own output only" sh -c "! grep -q 'mlsys-lab' '$tmp/ring5.out'"
"$bin" run ch07/pipeline-schedule-viz --trace "$tmp/sched.json" > /dev/null 2> "$tmp/sched.err"
check "headless: --trace where a lab starts no ranks says that nothing was written" sh -c "\
    grep -q 'ch07/pipeline-schedule-viz: --trace: nothing written to $tmp/sched.json: no ranks' \
    '$tmp/sched.err' && ! ls '$tmp/sched.json'* 2>/dev/null"
"$bin" run ch03/collective-cheatsheet -w 5 --algo recursive_doubling > /dev/null 2> "$tmp/rd5.err"
check "headless: a rank count an algorithm cannot take is said on stderr" grep -q \
    "all_gather ran direct: recursive_doubling needs a power-of-two number of ranks, not 5" \
    "$tmp/rd5.err"
start algo 140 42
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 3 Right j Enter
wait_for "launch ch03/collective-cheatsheet" 30
keys Down C-u "5 " Down Down Down C-u recursive_doubling
check "the form says where the chosen algorithm cannot run before launch" \
    wait_for "5 ranks is not a power of two, so the baseline runs instead" 20
check "and takes 5 with a trailing space" sh -c "! $T capture-pane -p -t $sess | grep -q 'fix the red'"
keys Enter
check "the run screen says the algorithm fell back" \
    wait_for "you chose recursive_doubling, but all_gather ran direct: recursive_doubling needs" 60
check "the title counts the ranks that run" wait_for "collective-cheatsheet · 5 ranks" 10
keys End 2
check "so does the log" wait_for "\\[run\\] you chose the recursive_doubling algorithm, but" 30
keys q Escape
# a lab that answers without ranks does not claim ranks
keys 2 Right j Enter
wait_for "launch ch02/send-recv-basic" 30
keys Down Space Enter           # show-deadlock, right under world-size
check "a lab that answered without ranks says so in the title" wait_for "no ranks started" 30
check "and in the status line" wait_for "the lab answered without starting ranks" 10
keys q Escape
# a single-process lab offers no algorithm, gate or trace
keys 1
sleep 0.3
keys j Enter
wait_for "launch ch01/verify-setup" 30
check "a one-process lab's form has no algo, gated, timeout or trace" sh -c "\
    ! $T capture-pane -p -t $sess | grep -Eq '^ .  (algo|gated|timeout|trace) '"
keys Escape
# the form speaks to a learner
keys 2
sleep 0.3
keys j j Enter
wait_for "launch ch02/pipeline-simulation" 30
check "no command-line asides in the form" sh -c "sleep 0.3; \
    ! $T capture-pane -p -t $sess | grep -q 'short alias'"
keys Escape q
check "q on home quits" wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

# ---- the chain relay, one hop per step: 42, 52, 62, 72 ----
start relay 120 40
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 2 Right j Enter
wait_for "launch ch02/send-recv-basic" 30
keys C-u 5 Up Up Space Enter
wait_for "the ranks wait at gate 1" 60
keys n
check "hop 0: rank 0 sends 42 to rank 1" wait_for "relay hop: rank 0 sends 42 to rank 1" 40
keys n
check "hop 1: rank 1 sends 52 to rank 2" wait_for "relay hop: rank 1 sends 52 to rank 2" 40
keys n
check "hop 2: rank 2 sends 62 to rank 3" wait_for "relay hop: rank 2 sends 62 to rank 3" 40
keys n
check "hop 3: rank 3 sends 72 to rank 4" wait_for "relay hop: rank 3 sends 72 to rank 4" 40
check "and rank 4 holds 72" wait_for "holds 72.0" 10
keys Q y
wait_for "^EXIT=0" 40
$T kill-session -t "$sess"

# ---- --ascii: one meaning per glyph ----
start ascii 120 40
keys "clear; $bin --ascii; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
check "--ascii: an exercise not tried yet is o, not ." \
    wait_for "ex  Run the first program on 8 .*\\.\\.\\. o" 20
check "--ascii: clipped text ends in ..., and ~ is not used for it" \
    sh -c "! $T capture-pane -p -t $sess | grep -q '~'"
keys '?'
check "--ascii: the help names the glyphs the tree draws" wait_for "o not tried yet" 20
keys Escape q
wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

# ---- the views of every lab: blocks, flow, timeline sections, the log at 80 columns ----
start views80 80 24
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 5 Right j j Enter
wait_for "launch ch05/gradient-sync-visualizer" 30
keys Enter
check "gradient-sync opens in the blocks view: every rank's gradient, one row each" \
    wait_for "^ r3 gradient " 60
check "with its buckets as the owners (block tables of the selected row)" \
    wait_for "block tables of r0 gradient|r0 gradient: 18 blocks" 20
check "an empty flow view speaks to a learner" sh -c "\
    $T send-keys -t $sess 6; sleep 0.5; $T capture-pane -p -t $sess | grep -q 'no roles yet'"
keys 2 G
check "the log wraps long lines at 80 columns: no [check] line loses its verdict" sh -c "\
    sleep 0.5; $T capture-pane -p -t $sess | grep -q 'PASS' && \
    ! $T capture-pane -p -t $sess | grep -Eq '^ \\[r[0-9]+\\].*…'"
keys q Escape
keys 7 Right j Enter
wait_for "launch ch07/pipeline-schedule-viz" 30
keys Enter
check "schedule all: each schedule is a step of the timeline, named, with its bubble" \
    wait_for "timeline .{1,3} GPipe .{1,3} step 1 of 4 .{1,3} bubble" 60
keys End
check "End: the last schedule, ZB-H1" wait_for "timeline .{1,3} ZB-H1 .{1,3} step 4 of 4" 20
keys 2 G
check "the lab's charts fit the log at 80 columns (blocks of slots)" sh -c "sleep 0.3; \
    ! $T capture-pane -p -t $sess | grep -q 'GPU [0-9]: .*…'"
keys q
# an empty file name field takes q as its first key; Esc says it goes back instead
sleep 0.3
to_field trace
check "on a file name field the footer offers Esc to go back, not q" \
    wait_for "Esc back" 20
keys q q . j s o n
check "q typed first into a file name field is text: the field holds qq.json" \
    wait_for "trace +\\[qq\\.json" 20
check "and the form is still open" wait_for "launch ch07/pipeline-schedule-viz" 5
keys C-a "$tmp/" Enter Enter
wait_for "pipeline-schedule-viz .{1,3} no ranks started" 60
keys End 2 G
check "a lab that starts no ranks says that --trace wrote nothing" \
    wait_for "trace: nothing written to $tmp/qq\\.json:" 30
check "and no file is there" sh -c "! ls $tmp/qq.json* 2>/dev/null"
keys q q q
check "q quits from home after the views, exit 0" wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

# ---- serving: ch09's engine gated (one iteration per n), the block map and the queue ----
start serve 120 40
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 9 Right j j Enter
wait_for "launch ch09/prefix-sharing-demo" 30
keys Up Up Space Enter
check "gated, the engine waits at its first gate, named" \
    wait_for "wait at gate 1: n lets them take it \\(engine step 1\\)" 150
keys n
check "one n: engine step 1 on the block map" wait_for "blocks: step 1: engine step 1" 100
check "the engine then waits at the next gate: one iteration per n" \
    wait_for "wait at gate 2: n lets them take it \\(engine step 2\\)" 100
check "each sequence's block table beside the map (the shared prompt first)" \
    wait_for "a req 0 +│ 0 1 2 3 4 " 20
check "a shared block shows its count (16 requests hold the system prompt)" \
    wait_for "^ +16 16 16 16 16 " 20
check "the step's line says what happened to the blocks" \
    wait_for "in this step: [0-9]+ allocated, [0-9]+ shared \\(prefix hits\\)" 20
check "the selected block says who holds it" \
    wait_for "kv cache, block 0 \\([0-9.]+ KiB\\): shared by req 0, req 1, req 2 and 13 more \\(16 references\\)" 20
check "the pool's line gives the pool's size (its blocks times one block's bytes)" \
    wait_for "^ kv cache: [0-9]+ blocks x [0-9]+ tokens = [0-9.]+ [KM]iB, " 20
keys 7
check "the server view: the queue in three columns" \
    wait_for "waiting \\(84\\) +│running \\(16\\) +│finished \\(0\\)" 20
check "the step's throughput" \
    wait_for "step 1 \\(16 tokens out in [0-9.]+ ms, [0-9]+ tokens/s\\):" 20
check "the step's batch: who prefills how many tokens (req 1 only its own 16: a prefix hit)" \
    wait_for "prefill req 0 \\(96\\), req 1 \\(16\\), req 2 \\(16\\)" 20
keys n
check "the next n: every running request decodes" \
    wait_for "decode req 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15" 100
keys Q y
check "Q y quits while the engine waits at its gate" wait_for "^EXIT=0" 60
$T kill-session -t "$sess"

# ---- serving at 80x24: ch08 opens in the server view, the queue and the recent steps ----
start serve80 80 24
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 8 Right j Enter
wait_for "launch ch08/minimal-inference-server" 30
keys Enter
check "ch08 opens in the server view: every request finished" \
    wait_for "waiting \\(0\\) +│running \\(0\\) +│finished \\(5\\)" 150
check "the recent steps, one line each, with tokens out" \
    wait_for "^ step +[0-9]+ +[0-9]+ rows? +[0-9]+ tok " 20
check "the title line fits 80 columns whole (its throughput last)" \
    wait_for "^ server . step [0-9]+ . 0 waiting . 0 running . 5 finished . [0-9]+ tokens/s\$" 20
keys q
sleep 0.3
keys q q
check "q quits from home after the server, exit 0" wait_for "^EXIT=0" 30
$T kill-session -t "$sess"
# ---- ch08 gated: the log keeps up with the view, and the times are the engine's ----
start gated8 120 40
keys "$bin; echo EXIT=\$?" Enter
wait_for "Chapter 1:" 30
keys 8 Right j Enter
wait_for "launch ch08/minimal-inference-server" 30
# two requests of three tokens: three engine steps and the idle gate, each held >= 0.5 s
to_field num-requests
keys C-u 2
to_field max-tokens
keys C-u 3
to_field gated
keys Space Enter
wait_for "wait at gate 1: n lets them take it" 150
keys 2
check "gated ch08 at its first gate: the log already shows what the lab printed before it" \
    wait_for "Processing: one line per engine step" 20
held=0
for g in 2 3 4 5; do
    sleep 0.5
    keys n
    wait_for "wait at gate $g: n lets them take it|finished: every rank exited 0" 100 || break
    held=$((held + 1))
    if [ "$g" = 2 ]; then
        check "after one n the log shows that step's line, not one step late" \
            wait_for "step +1 +[0-9.]+ ms +prefill r0:21 r1:29" 20
    fi
done
check "the four gates were held" eq "$held" 4
keys G
check "a gated run's report gives the engine's own time" \
    wait_for "total time +[0-9.]+ ms \\(the engine's own; the [0-9.]+ s it waited at its gates" 60
check "and how long it waited at its gates, at least the 2 s held here" sh -c "\
    $T capture-pane -p -t $sess | grep -Eo 'the [0-9.]+ s it waited at its gates' | \
    awk 'BEGIN { ok = 0 } \$2 >= 2.0 { ok = 1 } END { exit !ok }'"
keys Q
wait_for "^EXIT=0" 30
$T kill-session -t "$sess"

check "the marks of the labs run to the end are kept under MLSYS_LAB_HOME" \
    grep -q "^ch08/minimal-inference-server ok " "$tmp/lab/labs"
check "and nothing went to XDG_STATE_HOME" sh -c "[ -z \"\$(ls -A $tmp/state)\" ]"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
