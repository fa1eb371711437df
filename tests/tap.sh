# tap.sh - the counting the shell test scripts share (sourced): ok and bad count and print
# one line each (bad shows the first lines of a file that says why), finish prints the
# totals and exits non-zero when anything failed.
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; [ -n "$2" ] && sed 's/^/    /' "$2" | head -40; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
