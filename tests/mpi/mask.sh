# mask.sh - sourced by labs.sh and netns.sh: the sed -E scripts that mask what the clock
# decides in a lab's output, so that a run under --backend mpi (or across hosts) compares
# line by line with the same run on shm. mask_all applies to every lab; the others to a family.

# A number with a unit of time or rate ("3.2 ms", "1.4 GB/s", "812 tok/s", "2.6 min",
# "1.03 x"), the PIDs, the backend's name where a line says it, and a peak RSS (Open MPI's
# libraries are in the ranks' memory too); padding before a masked figure.
mask_all='s/PID [0-9]+/PID #/g
/^Backend: /d
s/\b(shm|mpi) (backend|transport)/BACKEND \2/g
s/[0-9]+(\.[0-9]+)? ?[KMGT]?i?B\/s/#B\/s/g
s/[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)? ?(ms|s|us|µs|ns|min|[a-z]+\/s|x)([^A-Za-z0-9_]|$)/#\3\4/g
s/ +#/ #/g
s/peak RSS rank 0 [0-9.]+ MiB, max over ranks [0-9.]+ MiB/peak RSS #/'

# ch05/simple-ddp: the table of step times and what is computed from them
mask_ddp='/^  (manual|DDP) +[0-9.]+ /d
/^  noise: /d
/^  t_fwd /d
/^  ratio t_comm/d'

# ch06/tp-mlp: the all-reduce's share of the time
mask_tp='s/^(comm%: +)[0-9.]+ %/\1# %/'

# ch07/pipeline-schedule-viz --run: the bubble measured from timestamps
mask_pp='s/measured [0-9.]+%/measured #%/g
s/([0-9]+: )[0-9.]+% \//\1#% \//g'

# ch13/rlhf-loop: seconds per iteration and the phases' shares, the weight sync's rate, the
# reward model's training time
mask_rlhf='s/^( +[0-9]+ +[-+][0-9.]+ +.* [0-9]e[-+][0-9]+)( +[0-9.]+)+ +[0-9%/]+$/\1 # #/
s/(generate|score|advantage|train|sync) [0-9.]+%/\1 #%/g
s/in [0-9.]+ ms per iteration after the first, [0-9.]+ GB\/s/in # per iteration, #/
s/held-out preference accuracy ([0-9.]+%) \(#s\)/held-out preference accuracy \1/'
