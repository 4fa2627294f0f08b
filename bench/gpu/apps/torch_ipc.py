"""CUDA memory and events shared between processes (`torch.multiprocessing`, spawn): the parent sends CUDA
tensors through a queue (cudaIpcGetMemHandle; torch records an interprocess event the receiver waits
on), a child computes on them on its own stream and sends its results back the same way. Under
`LD_PRELOAD` both processes run bind mode, each with its own pool."""
import torch.multiprocessing as mp

from common import deterministic_torch, digest_all, finish

ROUNDS = 6


def child(inbox, outbox):
    torch = deterministic_torch(1)
    side = torch.cuda.Stream()
    keep = []  # a sent tensor must outlive the receiver's use of it
    while True:
        x = inbox.get()
        if x is None:
            break
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.default_stream())
            y = torch.nn.functional.gelu(x @ x.T) / x.shape[1]
            y = torch.cumsum(y, dim=1)
        torch.cuda.current_stream().wait_stream(side)
        keep.append(y)
        outbox.put(y)
    outbox.put("done")


def main():
    torch = deterministic_torch(0)
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    g = torch.Generator(device="cuda").manual_seed(5)
    sent, got = [], []
    for i in range(ROUNDS):
        x = torch.randn(384, 256, device="cuda", generator=g)
        x = x * (i + 1)  # the last write before sending: the receiver must see it
        sent.append(x)
        inbox.put(x)
        y = outbox.get()
        got.append((y + 1).clone())  # read in this process, on its stream, after the sender's event
        del y
    inbox.put(None)
    assert outbox.get() == "done"
    p.join(timeout=120)
    if p.exitcode != 0:
        raise SystemExit(f"child exited with {p.exitcode}")
    torch.cuda.synchronize()
    finish({"results": digest_all(got), "sent": digest_all(sent)}, rounds=ROUNDS)


if __name__ == "__main__":
    main()
