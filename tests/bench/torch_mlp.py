#!/usr/bin/python3
# torch_mlp.py - timing, not a test: chapter 5's training step (784 -> 256 -> ReLU -> 10,
# softmax cross-entropy, batch 32, SGD) in PyTorch on one thread, the yardstick for
# tests/bench/nn_mlp.c. Prints samples per second; prints one "skipped: ..." line and
# exits 0 when torch is not importable. Usage: /usr/bin/python3 tests/bench/torch_mlp.py [SECONDS]
import os
import sys
import time

# both must be in the environment before torch (and the BLAS it loads) is imported
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except Exception as exc:  # ImportError, or a broken install that fails while loading
    print(f"skipped: torch not importable ({exc.__class__.__name__}: {exc})")
    sys.exit(0)

B, IN, HID, OUT = 32, 784, 256, 10


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.ReLU(),
                                torch.nn.Linear(HID, OUT))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(B, IN)                       # a fixed synthetic batch, like nn_mlp.c
    y = torch.randint(0, OUT, (B,))

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(20):                         # warm-up
        step()
    first = step()
    steps = 1
    t0 = time.perf_counter()
    while True:
        last = step()
        steps += 1
        t = time.perf_counter()
        if t - t0 >= seconds:
            break
    sps = (steps - 1) * B / (t - t0)
    print(f"torch_mlp: {IN} -> {HID} -> relu -> {OUT}, softmax ce, batch {B}, sgd, "
          f"{torch.get_num_threads()} thread (torch {torch.__version__})")
    print(f"torch {sps:10.0f} samples/s  ({1e6 * B / sps:.1f} us/step, "
          f"loss {first:.3f} -> {last:.3f})")


if __name__ == "__main__":
    main()
