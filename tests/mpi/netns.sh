#!/bin/bash
# netns.sh - two "hosts" on this machine: network namespaces joined by a veth pair
# (10.77.0.1/24 and 10.77.0.2/24, private addresses of namespaces made here and removed at
# the end), each with its own hostname (a UTS namespace: Open MPI names its shared-memory
# segments after the host, and two "hosts" that share /dev/shm and a name would share them).
# mpirun runs in the first and starts its daemon in the second through an rsh agent that
# enters that namespace; labs run across both with a hostfile, 1 and 2 ranks per host, and
# the ranks' events reach the collector over the veth.
# Usage: tests/mpi/netns.sh [BUILD_DIR]   (skips, saying precisely why, when it cannot run)
build=${1:-build}
bin=$PWD/$build/mlsys-lab
. "$(dirname "$0")/../tap.sh"    # ok, bad, finish and their counts
tmp=$(mktemp -d)
nsa=mlsys-a-$$
nsb=mlsys-b-$$
va=mlva$$
vb=mlvb$$
made=""
export LANG=C.UTF-8

cleanup() {
    local ns
    for ns in $made; do
        ip netns del "$ns" 2>/dev/null    # takes its end of the veth pair with it
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

skip() { echo "skip: $1"; finish; }

command -v mpirun >/dev/null 2>&1 || skip "mpirun is not on PATH (apt-get install openmpi-bin libopenmpi-dev)"
command -v ip >/dev/null 2>&1 || skip "the ip command is missing (apt-get install iproute2)"
command -v unshare >/dev/null 2>&1 || skip "unshare is missing (apt-get install util-linux)"
[ -x "$bin" ] || skip "$bin is not built (make BUILD=$build)"
[ -f "$build/libmlsys-mpi.so" ] || skip "the MPI plugin $build/libmlsys-mpi.so is not built"
if ! ip netns add "$nsa" 2>"$tmp/err"; then
    skip "cannot create a network namespace: $(cat "$tmp/err") (needs root or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
fi
made="$nsa"
ip netns add "$nsb" 2>"$tmp/err" || skip "cannot create a second network namespace: $(cat "$tmp/err")"
made="$nsa $nsb"
if ! ip link add "$va" type veth peer name "$vb" 2>"$tmp/err"; then
    skip "cannot create a veth pair: $(cat "$tmp/err") (the kernel needs CONFIG_VETH)"
fi
if ! { ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb" &&
       ip -n "$nsa" addr add 10.77.0.1/24 dev "$va" && ip -n "$nsb" addr add 10.77.0.2/24 dev "$vb" &&
       ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
       ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up; } 2>"$tmp/err"; then
    ip link del "$va" 2>/dev/null
    skip "cannot wire the namespaces: $(cat "$tmp/err")"
fi
echo "hosts: $nsa = 10.77.0.1, $nsb = 10.77.0.2 (veth $va <-> $vb)"

if ! ip netns exec "$nsa" unshare --uts sh -c "hostname $nsa" 2>"$tmp/err"; then
    skip "cannot give a namespace its own hostname (unshare --uts): $(cat "$tmp/err")"
fi

# the rsh agent: `agent [options] HOST COMMAND...` runs COMMAND in HOST's namespaces, through
# a shell as ssh would
cat >"$tmp/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
    case "\$1" in
    -*) shift ;;
    *) break ;;
    esac
done
host=\$1
shift
echo "\$host \$*" >>$tmp/agent.log
case "\$host" in
10.77.0.1) ns=$nsa ;;
10.77.0.2) ns=$nsb ;;
*) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$ns && \$*"
EOF
chmod +x "$tmp/agent"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$tmp/hosts"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$tmp/hosts2"

export MLSYS_MPI_PLUGIN=$PWD/$build/libmlsys-mpi.so OMPI_MCA_plm_rsh_agent=$tmp/agent
# mpirun must not try the other interfaces of the host; the namespaces only have these
export OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 OMPI_MCA_btl_tcp_if_include=10.77.0.0/24
run_ab() {    # run_ab LAB ARGS...: in the first host, under its own name
    timeout 60 ip netns exec "$nsa" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' \
        "$nsa" "$bin" run "$@"
}
run_ab ch01/hello-distributed --backend mpi -w 2 --hostfile "$tmp/hosts" --events-addr 10.77.0.1 \
    --trace "$tmp/t.json" -v >"$tmp/out" 2>"$tmp/errs"
rc=$?
cat "$tmp/out" "$tmp/errs" >"$tmp/all"
if [ $rc -eq 0 ] && grep -q '^Rank 0/2: hello' "$tmp/out" && grep -q '^Rank 1/2: hello' "$tmp/out" &&
   grep -q '^correct: yes' "$tmp/out"; then
    ok "hello-distributed across two namespaces (mpirun in $nsa, its daemon started in $nsb by the agent)"
else
    echo "exit status $rc" >>"$tmp/all"
    bad "hello-distributed across two namespaces" "$tmp/all"
fi
# rank 1 really ran in the second namespace: the agent started mpirun's daemon for 10.77.0.2,
# and rank 1's event stream came from that address, rank 0's from 10.77.0.1
cat "$tmp/agent.log" >>"$tmp/all" 2>/dev/null
if grep -q '^10\.77\.0\.2 .*orted' "$tmp/agent.log" 2>/dev/null &&
   grep -Eq '^mlsys-lab: events: rank 0 \(pid [0-9]+\) connected from 10\.77\.0\.1:' "$tmp/errs" &&
   grep -Eq '^mlsys-lab: events: rank 1 \(pid [0-9]+\) connected from 10\.77\.0\.2:' "$tmp/errs"; then
    ok "rank 0 ran in $nsa (10.77.0.1), rank 1 in $nsb (10.77.0.2), started there by the agent"
else
    bad "each rank in its own namespace" "$tmp/all"
fi
if grep -q -- '--hostfile' "$tmp/errs" && grep -Eq '^mlsys-lab: trace: [1-9][0-9]* events written to .* \(0 lost\)$' "$tmp/errs"; then
    tids=$(sed -n 's/.*"tid":\([0-9]*\).*/\1/p' "$tmp/t.json" | sort -u | tr '\n' ' ')
    if [ "$tids" = "0 1 " ]; then
        ok "events of both ranks reached the collector on 10.77.0.1 ($(sed -n 's/.*trace: \([0-9]*\) events.*/\1/p' "$tmp/errs") events)"
    else
        echo "ranks in the trace: $tids" >>"$tmp/all"
        bad "events of both ranks in the trace" "$tmp/all"
    fi
else
    bad "events over the veth" "$tmp/all"
fi

# two ranks per host: shared memory inside a host, TCP between them; the same output as shm
run_ab ch03/collective-cheatsheet --backend mpi -w 4 --hostfile "$tmp/hosts2" \
    --events-addr 10.77.0.1 --trace "$tmp/t4.json" -v >"$tmp/out4" 2>"$tmp/errs4"
rc=$?
"$bin" run ch03/collective-cheatsheet -w 4 >"$tmp/shm4" 2>&1
{ diff "$tmp/shm4" "$tmp/out4"; cat "$tmp/errs4"; echo "exit status $rc"; } >"$tmp/all4"
if [ $rc -eq 0 ] && cmp -s "$tmp/shm4" "$tmp/out4" &&
   [ "$(grep -Ec '^mlsys-lab: events: rank [01] .* from 10\.77\.0\.1:' "$tmp/errs4")" = 2 ] &&
   [ "$(grep -Ec '^mlsys-lab: events: rank [23] .* from 10\.77\.0\.2:' "$tmp/errs4")" = 2 ] &&
   grep -Eq '^mlsys-lab: trace: [1-9][0-9]* events written to .* \(0 lost\)$' "$tmp/errs4"; then
    ok "collective-cheatsheet on 4 ranks, 2 per host: output as on shm, ranks 0-1 in $nsa, 2-3 in $nsb"
else
    bad "collective-cheatsheet on 4 ranks, 2 per host" "$tmp/all4"
fi
# The parallelism families across the two hosts, one rank per host (TCP between them) and,
# for the RLHF split, two per host: each prints what it prints on shm, timings masked
# (mask.sh). DDP also writes a trace: both hosts' events, the buckets' progress thread's too
# (the lanes 1000 + rank of the spans the progress thread ran).
. "$(dirname "$0")/mask.sh"
family() {   # family NAME HOSTS MASK LAB ARGS...
    local name=$1 hosts=$2 mask=$3
    shift 3
    run_ab "$@" --backend mpi --hostfile "$hosts" --events-addr 10.77.0.1 \
        >"$tmp/f.out" 2>"$tmp/f.err"
    local rc=$?
    "$bin" run "$@" >"$tmp/f.shm" 2>&1
    local rs=$?
    cat "$tmp/f.out" "$tmp/f.err" | sed -E -e "$mask_all" ${mask:+-e "$mask"} -e 's/ +#/ #/g' \
        | grep -v '^mlsys-lab: events: ' >"$tmp/f.b"
    sed -E -e "$mask_all" ${mask:+-e "$mask"} -e 's/ +#/ #/g' "$tmp/f.shm" >"$tmp/f.a"
    { diff "$tmp/f.a" "$tmp/f.b"; tail -5 "$tmp/f.err"; echo "exit status $rc (shm $rs)"; } >"$tmp/f.d"
    if [ $rc -eq 0 ] && [ $rs -eq 0 ] && [ -s "$tmp/f.a" ] && cmp -s "$tmp/f.a" "$tmp/f.b"; then
        ok "$name across $nsa and $nsb: $(wc -l <"$tmp/f.a") lines as on shm"
    else
        bad "$name across $nsa and $nsb" "$tmp/f.d"
    fi
}
family "DDP (simple-ddp, buckets, ZeRO-2)" "$tmp/hosts" "$mask_ddp" ch05/simple-ddp -w 2 \
    --max-steps 2 --hidden 64 --zero 2 --trace "$tmp/ddp.json"
tids=$(sed -n 's/.*"tid":\([0-9]*\).*/\1/p' "$tmp/ddp.json" 2>/dev/null | sort -u | tr '\n' ' ')
if [ "$tids" = "0 1 1000 1001 " ] && grep -q 'async"' "$tmp/ddp.json" &&
   grep -Eq '^mlsys-lab: trace: [1-9][0-9]* events written to .* \(0 lost\)$' "$tmp/f.err"; then
    ok "DDP's events of both hosts in the trace, the non-blocking buckets' among them"
else
    { echo "ranks in the trace: $tids"; cat "$tmp/f.err"; } >"$tmp/f.d"
    bad "DDP's events of both hosts in the trace" "$tmp/f.d"
fi
family "TP (tp-mlp)" "$tmp/hosts" "$mask_tp" ch06/tp-mlp -t 2 -H 32
family "PP (pipeline-schedule-viz --run, 1F1B)" "$tmp/hosts" "$mask_pp" \
    ch07/pipeline-schedule-viz --run -P 2 -m 4 --schedule 1f1b --layers 4 --hidden 32 --batch-size 8
family "RLHF split (1 generator, 3 trainers)" "$tmp/hosts2" "$mask_rlhf" ch13/rlhf-loop -w 4 \
    --placement split --iterations 2 --prompts 12 --rm-steps 5
finish
