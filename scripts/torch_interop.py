#!/usr/bin/env python3
"""torch_interop.py - mpsdiag checkpoints and PyTorch state dicts, tested both ways.

For small_cnn, resnet18_cifar_w8 (resnet18_cifar at 1/8 width, the committed
fixtures) and, unless --quick, the full resnet18_cifar, with channels-last on
and off:

  (a) mpsdiag trains two steps and writes last.safetensors and, with
      --dump-logits, the evaluation logits of a fixed batch. The checkpoint
      (less its "__optim__." optimizer state) loads into the equivalent
      torch.nn.Module with load_state_dict(strict=True), and the module in
      eval mode gives the same logits on the same batch.
  (b) a state dict written by PyTorch (random weights and BatchNorm
      statistics, num_batches_tracked included) loads through
      `mpsdiag --init-from` and mpsdiag gives PyTorch's logits.
  (c) the checkpoint's tensors are exactly the module's state_dict() entries
      (names, shapes, dtypes) less the num_batches_tracked counters.

With --write-fixtures it (re)writes test/fixtures/interop/: per fixture model
<model>.torch.safetensors (the PyTorch state dict of (b)) and
<model>.logits.safetensors (the input batch and PyTorch's logits), which the
test suite (test/test_interop.c) checks on every `make test`.

Run by hand from the repository root after `make`, with Debian's python3-torch
(CPU; no `safetensors` package needed: the format is read and written here):
    python3 scripts/torch_interop.py [--quick] [--write-fixtures] [--bin build/mpsdiag] [--device cuda]
Exit status 0 when every comparison is within tolerance.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

from torch_models import SmallCNN, ResNet18Cifar, st_read, st_write

FIXTURES = "test/fixtures/interop"
SAMPLE = ["--dataset", "fashion-mnist", "--data-dir", "data/fashion-mnist-sample", "--max-samples", "64"]
SYNTH = ["--dataset", "synthetic", "--max-samples", "32"]
CASES = [
    # name, --model, module, data flags, fixture
    ("small_cnn", "small_cnn", lambda: SmallCNN(10), SAMPLE, True),
    ("resnet18_cifar_w8", FIXTURES + "/resnet18_cifar_w8.json", lambda: ResNet18Cifar(8, 10), SYNTH, True),
    ("resnet18_cifar", "resnet18_cifar", lambda: ResNet18Cifar(64, 100), SYNTH, False),
]
LAYOUTS = ["--channels-last", "--no-channels-last"]
# fp32 on two implementations: the sums run in other orders
ATOL, RTOL = 1e-4, 1e-4


DEVICE = ["--device", "cpu"]


def run(binary, args):
    cmd = [binary] + DEVICE + ["--batch-size", "4", "--num-workers", "0", "--seed", "1",
           "--precision", "fp32", "--quiet"] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("mpsdiag failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr))


def compare(what, got, ref):
    err = (got - ref).abs()
    bound = ATOL + RTOL * ref.abs()
    ok = bool((err <= bound).all())
    print("  %-58s max |diff| %.3g (max |logit| %.3g)  %s" % (what, err.max().item(), ref.abs().max().item(),
                                                             "ok" if ok else "FAILED"))
    return ok


def model_part(sd):
    return {k: v for k, v in sd.items() if not k.startswith("__optim__.")}


def torch_state(make):
    """A module with random weights and BatchNorm statistics (so evaluation
    mode uses them), as a user's trained model would have."""
    torch.manual_seed(0)
    m = make()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.3, 0.3)
                mod.running_var.uniform_(0.5, 2.0)
                mod.num_batches_tracked.fill_(7)
    return m.eval()


def check_case(binary, tmp, name, model, make, data, fixture, write_fixtures):
    ok = True
    print(name)
    ref = make()
    want = ref.state_dict()
    for lay in LAYOUTS:
        d = os.path.join(tmp, name + lay)
        os.makedirs(d)
        # (a) an mpsdiag checkpoint into PyTorch
        logits = os.path.join(d, "trained_logits.safetensors")
        run(binary, ["--model", model] + data + [lay, "--epochs", "1", "--steps", "2", "--checkpoint-dir",
                                                 os.path.join(d, "ck"), "--dump-logits", logits])
        ck, meta = st_read(os.path.join(d, "ck", "last.safetensors"))
        if meta.get("tensor_layout") != "pytorch":
            print("  %s: metadata tensor_layout is %r" % (lay, meta.get("tensor_layout")))
            ok = False
        sd = model_part(ck)
        # (c) names, shapes and dtypes of the state dict, less num_batches_tracked
        expect = {k: v for k, v in want.items() if not k.endswith("num_batches_tracked")}
        same = sorted(sd) == sorted(expect) and all(sd[k].shape == expect[k].shape and sd[k].dtype == expect[k].dtype
                                                    for k in sd)
        print("  %-58s %s" % ("%s checkpoint: state_dict names, shapes, dtypes" % lay, "ok" if same else "FAILED"))
        ok &= same
        m = make()
        m.load_state_dict(sd, strict=True)
        m.eval()
        out, _ = st_read(logits)
        with torch.no_grad():
            got = m(out["input.image"])
        ok &= compare("%s checkpoint -> PyTorch (strict=True), logits" % lay, got, out["logits"])
        # (b) a PyTorch state dict into mpsdiag
        tm = torch_state(make)
        sd_path = os.path.join(d, "torch.safetensors")
        st_write(sd_path, tm.state_dict())
        logits = os.path.join(d, "init_logits.safetensors")
        run(binary, ["--model", model] + data + [lay, "--epochs", "0", "--init-from", sd_path,
                                                 "--checkpoint-dir", os.path.join(d, "ck0"), "--dump-logits", logits])
        out, _ = st_read(logits)
        with torch.no_grad():
            want_logits = tm(out["input.image"])
        ok &= compare("%s PyTorch state dict -> --init-from, logits" % lay, out["logits"], want_logits)
        if fixture and write_fixtures and lay == "--no-channels-last":
            st_write(os.path.join(FIXTURES, name + ".torch.safetensors"), tm.state_dict(),
                     {"source": "scripts/torch_interop.py", "torch": torch.__version__})
            st_write(os.path.join(FIXTURES, name + ".logits.safetensors"),
                     {"input.image": out["input.image"], "logits": want_logits},
                     {"source": "scripts/torch_interop.py", "torch": torch.__version__,
                      "state_dict": name + ".torch.safetensors"})
            print("  wrote %s/%s.{torch,logits}.safetensors" % (FIXTURES, name))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/mpsdiag")
    ap.add_argument("--device", default="cpu", help="mpsdiag's device (cuda runs fp32 without TF32)")
    ap.add_argument("--quick", action="store_true", help="skip the full-width resnet18_cifar")
    ap.add_argument("--write-fixtures", action="store_true", help="rewrite " + FIXTURES)
    a = ap.parse_args()
    DEVICE[:] = ["--device", a.device] + (["--no-tf32"] if a.device.startswith("cuda") else [])
    if not os.path.exists(a.bin):
        sys.exit("%s: not built (run make)" % a.bin)
    torch.set_num_threads(2)
    print("torch %s, %s" % (torch.__version__, a.bin))
    ok = True
    with tempfile.TemporaryDirectory(prefix="mpsdiag-interop-") as tmp:
        for name, model, make, data, fixture in CASES:
            if a.quick and not fixture:
                continue
            ok &= check_case(a.bin, tmp, name, model, make, data, fixture, a.write_fixtures)
    print("all within |diff| <= %g + %g |ref|" % (ATOL, RTOL) if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
