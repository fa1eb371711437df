#!/usr/bin/python3
# torch_ppo.py - timing, not a test: the PyTorch peer of ch12/ppo-cartpole. PPO with CleanRL's
# defaults for CartPole-v1 (4 environments x 128 steps, 4 epochs x 4 minibatches, 2x64 tanh
# actor and critic with orthogonal init, Adam annealed, eps 1e-5, GAE 0.95, clip 0.2
# for the policy and the value, entropy 0.01, value 0.5, gradient norm 0.5, advantages
# normalised per minibatch) on one thread, CartPole-v1's physics written here in Python as
# gymnasium does (gymnasium is not needed). Per seed it prints one line: environment steps
# per second, the step at which the mean return of the last 100 episodes first reached 475,
# and the wall time to it. --lr is the lab's default, 1e-3 (CleanRL's is 2.5e-4); --stats N
# prints every N rollouts the update's approximate KL and clip fraction, means over its
# minibatches, as the lab's table does. Prints one "skipped: ..." line and exits 0 without
# torch.
# Usage: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tests/bench/torch_ppo.py [--seeds 1,2,3]
#        [--total-steps 500000] [--lr 1e-3] [--stats 25]
import argparse
import math
import os
import random
import sys
import time

# both before torch (and the BLAS it loads) is imported
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
    import torch.nn as nn
except Exception as exc:  # ImportError, or a broken install that fails while loading
    print(f"skipped: torch not importable ({exc.__class__.__name__}: {exc})")
    sys.exit(0)


class CartPole:
    """CartPole-v1: Euler steps of 0.02 s, ends past 12 degrees or 2.4, truncated at 500."""

    def __init__(self, rng):
        self.rng = rng
        self.reset()

    def reset(self):
        self.s = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.steps = 0
        return list(self.s)

    def step(self, action):
        x, x_dot, th, th_dot = self.s
        force = 10.0 if action == 1 else -10.0
        c, s = math.cos(th), math.sin(th)
        temp = (force + 0.05 * th_dot * th_dot * s) / 1.1
        th_acc = (9.8 * s - c * temp) / (0.5 * (4.0 / 3.0 - 0.1 * c * c / 1.1))
        x_acc = temp - 0.05 * th_acc * c / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        th, th_dot = th + 0.02 * th_dot, th_dot + 0.02 * th_acc
        self.s = [x, x_dot, th, th_dot]
        self.steps += 1
        limit = 12 * 2 * math.pi / 360
        terminated = x < -2.4 or x > 2.4 or th < -limit or th > limit
        truncated = self.steps >= 500
        return list(self.s), 1.0, terminated, truncated


def layer(n_in, n_out, std=math.sqrt(2)):
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(),
                                    layer(64, 1, std=1.0))
        self.actor = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(),
                                   layer(64, 2, std=0.01))

    def act(self, obs, action=None):
        dist = torch.distributions.Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(obs).squeeze(-1)


def run(seed, total_steps, lr0, stats_every):
    E, T, epochs, n_mb = 4, 128, 4, 4
    gamma, lam, clip, ent_coef, vf_coef, max_norm = 0.99, 0.95, 0.2, 0.01, 0.5, 0.5
    batch = E * T
    mb = batch // n_mb
    iters = total_steps // batch
    random.seed(seed)
    torch.manual_seed(seed)
    envs = [CartPole(random.Random(seed * 1000 + i)) for i in range(E)]
    agent = Agent()
    opt = torch.optim.Adam(agent.parameters(), lr=lr0, eps=1e-5)
    obs_b = torch.zeros(T, E, 4)
    act_b = torch.zeros(T, E, dtype=torch.long)
    logp_b = torch.zeros(T, E)
    rew_b = torch.zeros(T, E)
    done_b = torch.zeros(T, E)
    val_b = torch.zeros(T, E)
    next_obs = torch.tensor([e.s for e in envs], dtype=torch.float32)
    next_done = torch.zeros(E)
    ep_ret = [0.0] * E
    window = []
    step = 0
    solved_step, solved_s = None, None
    t0 = time.perf_counter()
    for it in range(1, iters + 1):
        for g in opt.param_groups:
            g["lr"] = (1.0 - (it - 1.0) / iters) * lr0
        for t in range(T):
            step += E
            obs_b[t] = next_obs
            done_b[t] = next_done
            with torch.no_grad():
                a, logp, _, v = agent.act(next_obs)
            act_b[t], logp_b[t], val_b[t] = a, logp, v
            obs_list, dones = [], []
            for i, env in enumerate(envs):
                o, r, term, trunc = env.step(int(a[i]))
                rew_b[t, i] = r
                ep_ret[i] += r
                if term or trunc:
                    window.append(ep_ret[i])
                    ep_ret[i] = 0.0
                    o = env.reset()
                obs_list.append(o)
                dones.append(1.0 if (term or trunc) else 0.0)
            next_obs = torch.tensor(obs_list, dtype=torch.float32)
            next_done = torch.tensor(dones)
            if solved_step is None and len(window) >= 100 and sum(window[-100:]) / 100 >= 475:
                solved_step, solved_s = step, time.perf_counter() - t0
        with torch.no_grad():
            next_v = agent.critic(next_obs).squeeze(-1)
            adv = torch.zeros(T, E)
            last = torch.zeros(E)
            for t in reversed(range(T)):
                if t == T - 1:
                    keep, nv = 1.0 - next_done, next_v
                else:
                    keep, nv = 1.0 - done_b[t + 1], val_b[t + 1]
                delta = rew_b[t] + gamma * nv * keep - val_b[t]
                last = delta + gamma * lam * keep * last
                adv[t] = last
            ret = adv + val_b
        b_obs, b_act, b_logp = obs_b.reshape(-1, 4), act_b.reshape(-1), logp_b.reshape(-1)
        b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_b.reshape(-1)
        kls, clips = [], []
        for _ in range(epochs):
            perm = torch.randperm(batch)
            for k in range(n_mb):
                idx = perm[k * mb:(k + 1) * mb]
                _, logp, ent, v = agent.act(b_obs[idx], b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                a_mb = b_adv[idx]
                a_mb = (a_mb - a_mb.mean()) / (a_mb.std() + 1e-8)
                pg = torch.max(-a_mb * ratio, -a_mb * ratio.clamp(1 - clip, 1 + clip)).mean()
                v_clip = b_val[idx] + (v - b_val[idx]).clamp(-clip, clip)
                vl = 0.5 * torch.max((v - b_ret[idx]) ** 2, (v_clip - b_ret[idx]) ** 2).mean()
                loss = pg - ent_coef * ent.mean() + vf_coef * vl
                with torch.no_grad():
                    lr_ = logp - b_logp[idx]
                    kls.append(((lr_.exp() - 1) - lr_).mean().item())
                    clips.append(((lr_.exp() - 1).abs() > clip).float().mean().item())
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), max_norm)
                opt.step()
        if stats_every and it % stats_every == 0:
            m100 = sum(window[-100:]) / max(1, min(len(window), 100))
            print(f"torch seed {seed} step {step:7d} mean100 {m100:6.1f} approxkl "
                  f"{sum(kls) / len(kls):.4f} clipfrac {sum(clips) / len(clips):.3f}", flush=True)
    wall = time.perf_counter() - t0
    return step, wall, solved_step, solved_s, (sum(window[-100:]) / min(len(window), 100))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--total-steps", type=int, default=500000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--stats", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch_ppo: CleanRL's PPO defaults on CartPole-v1 but lr {args.lr:g}, "
          f"{torch.get_num_threads()} thread (torch {torch.__version__})")
    for s in (int(x) for x in args.seeds.split(",")):
        steps, wall, ss, st, final = run(s, args.total_steps, args.lr, args.stats)
        solved = f"solved at step {ss} after {st:.1f} s" if ss else "not solved"
        print(f"torch seed {s}: {steps / wall:8.0f} steps/s | {solved} | final mean100 "
              f"{final:.1f} | {steps} steps in {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
