"""The LightningModules: optimiser groups, schedule, compile, checkpoints, throughput arithmetic."""

import csv
import math
import os
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.testing import assert_close
from torch.utils.data import DataLoader, TensorDataset

from transformers_scratch import (
    CausalLM,
    ClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    LMConfig,
    SequenceClassifier,
)
from transformers_scratch.training.callbacks import SafeModelCheckpoint, SampleText, Throughput, TrainingDiverged
from transformers_scratch.training.modules import LitCharLM
from transformers_scratch.training.optim import OptimConfig, StackedMuon, build_optimizer, decay_groups, lr_factor
from transformers_scratch.training.perf import non_embedding_params, peak_flops, train_flops_per_token

TINY = LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=2)


def loader(n: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (n, 17), generator=g)
    return DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=8)


def trainer(tmp_path, **kwargs) -> L.Trainer:
    defaults = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                    default_root_dir=tmp_path)  # fmt: skip
    return L.Trainer(**{**defaults, **kwargs})


def test_weight_decay_only_on_matrices(tmp_path):
    module = LitCharLM(TINY, OptimConfig(weight_decay=0.1))
    module.trainer = trainer(tmp_path, max_steps=10)
    opt = module.configure_optimizers()["optimizer"]
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() >= 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and all(p.dim() < 2 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(module.parameters()))


def test_weight_decay_is_decided_by_module_not_shape():
    """FSDP hands the optimizer flat 1-D shards, so a shape rule would decay nothing there."""
    model = SequenceClassifier(ClassifierConfig(vocab_size=50, context=8, emb=16, heads=2, depth=1, pool="cls"))
    decay, plain = decay_groups(model)
    assert {id(p) for p in decay} == {id(p) for n, p in model.named_parameters() if p.dim() >= 2 and n != "cls"}
    assert any(p is model.cls for p in plain)  # the [CLS] vector is not decayed
    flat = torch.nn.Linear(4, 4)
    flat.weight = torch.nn.Parameter(flat.weight.detach().flatten())  # as FSDP's use_orig_params views look
    assert decay_groups(flat)[0] == [flat.weight]


@pytest.mark.parametrize(
    "model",
    [
        CausalLM(replace(TINY, tie_weights=True)),
        EncoderDecoder(EncoderDecoderConfig(vocab_size=20, context=8, emb=16, heads=2, depth=1)),  # shared vocab
        SequenceClassifier(ClassifierConfig(vocab_size=50, context=8, emb=16, heads=2, depth=1, pool="cls")),
    ],
    ids=["tied-lm", "encoder-decoder", "classifier"],
)
def test_every_parameter_is_in_exactly_one_group(model):
    decay, plain = decay_groups(model)
    ids = [id(p) for p in decay + plain]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})


def test_one_step_on_tied_weights_is_one_adamw_step(tmp_path):
    """The tied embedding/output matrix gets one update and one decay per step, as plain AdamW gives it."""
    cfg = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=0, schedule="constant")
    module = LitCharLM(replace(TINY, tie_weights=True), cfg)
    module.trainer = trainer(tmp_path, max_steps=1)
    reference = CausalLM(replace(TINY, tie_weights=True))
    reference.load_state_dict(module.model.state_dict())
    opt = module.configure_optimizers()["optimizer"]
    plain = torch.optim.AdamW(reference.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0)
    x, y = next(iter(loader()))
    for model in (module.model, reference):
        torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    tied = module.model.head.weight
    with torch.no_grad():  # the decay AdamW applies to that one matrix: p *= 1 - lr * wd, once
        reference.head.weight.mul_(1 - 1e-2 * 0.1)
    opt.step()
    plain.step()
    assert opt.state[tied]["step"].item() == 1
    assert_close(tied, reference.head.weight, rtol=0, atol=1e-7)


@pytest.mark.parametrize("stacked", [False, True], ids=["torch-muon", "stacked-muon"])
def test_muon_steps_the_blocks_matrices_and_adamw_the_rest_as_the_two_would_alone(tmp_path, stacked):
    """optimizer muon: torch's Muon (or StackedMuon) over the linear weights inside the blocks, AdamW (decayed
    and plain groups) over embeddings, the output layer, norms and biases; every parameter in one group, and
    one step equals torch's two optimizers stepped on their own parameters."""
    cfg = OptimConfig(optimizer="muon", lr=1e-2, muon_lr=0.05, warmup_steps=0, schedule="constant",
                      muon_stacked=stacked)  # fmt: skip
    module = LitCharLM(replace(TINY, tie_weights=True), cfg)
    module.trainer = trainer(tmp_path, max_steps=1)
    opt = module.configure_optimizers()["optimizer"]
    assert type(opt.parts[1]) is (StackedMuon if stacked else torch.optim.Muon)
    opt.parts[1].ns_dtype = torch.bfloat16  # torch's arithmetic, to compare with it (a CPU's default: float32)
    roles = {g["role"]: g for g in opt.param_groups}
    assert list(roles) == ["decay", "plain", "muon"]
    blocks = {id(m.weight) for m in module.model.stack.modules() if isinstance(m, torch.nn.Linear)}
    assert {id(p) for p in roles["muon"]["params"]} == blocks and len(blocks) == 4 * TINY.depth
    tables = {id(p) for m in module.model.embed.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    assert {id(p) for p in roles["decay"]["params"]} == tables  # tokens (tied: also the head) and positions
    every = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(every) == len(set(every)) == len(list(module.parameters()))

    reference = CausalLM(replace(TINY, tie_weights=True))
    reference.load_state_dict(module.model.state_dict())
    ref_blocks = [m.weight for m in reference.stack.modules() if isinstance(m, torch.nn.Linear)]
    muon = torch.optim.Muon(ref_blocks, lr=0.05, weight_decay=0.1)
    adamw = torch.optim.AdamW([p for p in reference.parameters() if all(p is not q for q in ref_blocks)], lr=1e-2,
                              betas=(0.9, 0.95), weight_decay=0.0)  # fmt: skip
    x, y = next(iter(loader()))
    for model in (module.model, reference):
        torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    with torch.no_grad():  # the decayed AdamW tables
        for m in reference.embed.modules():
            if isinstance(m, torch.nn.Embedding):
                m.weight.mul_(1 - 1e-2 * 0.1)
    opt.step()
    muon.step(), adamw.step()
    for (name, a), b in zip(module.model.named_parameters(), reference.parameters(), strict=True):
        assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    state = opt.state_dict()
    again = LitCharLM(replace(TINY, tie_weights=True), cfg)
    again.trainer = trainer(tmp_path, max_steps=1)
    restored = again.configure_optimizers()["optimizer"]
    restored.load_state_dict(state)
    assert [g["role"] for g in restored.param_groups] == ["decay", "plain", "muon"]
    assert len(restored.state) == len(opt.state) == len(every)
    # the schedule sets rates through the wrapper's groups: after a restore they must be the parts' own
    restored.param_groups[2]["lr"] = 0.0
    assert [g["lr"] for part in restored.parts for g in part.param_groups] == [1e-2, 1e-2, 0.0]


@pytest.mark.parametrize("nesterov, rule", [(True, None), (False, "match_rms_adamw")])
def test_stacked_muon_steps_as_torchs_muon_does_matrix_by_matrix(nesterov, rule):
    """StackedMuon orthogonalises the matrices of one shape together, a tall matrix turned wide as torch turns
    it: three steps over tall, wide and square matrices (two tall and one wide of the same shape, one alone)
    give torch's Muon's parameters, and its state loads into torch's Muon."""
    torch.manual_seed(0)
    shapes = [(24, 8), (8, 24), (24, 8), (8, 8), (16, 8)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    options = {"lr": 0.05, "weight_decay": 0.1, "nesterov": nesterov, "adjust_lr_fn": rule}
    stacked, reference = StackedMuon(ours, ns_dtype=torch.bfloat16, **options), torch.optim.Muon(theirs, **options)
    for _ in range(3):
        for p, q in zip(ours, theirs, strict=True):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        stacked.step(), reference.step()
    for p, q in zip(ours, theirs, strict=True):
        assert_close(p, q, rtol=0, atol=1e-6)
    reference.load_state_dict(stacked.state_dict())
    assert all(torch.equal(reference.state[q]["momentum_buffer"], stacked.state[p]["momentum_buffer"])
               for p, q in zip(ours, theirs, strict=True))  # fmt: skip


def test_stacked_muon_iterates_in_float32_on_a_cpu_and_lands_near_torchs_bf16(monkeypatch):
    """On a CPU the Newton-Schulz iteration runs in float32 (bf16 products are ten times slower on a CPU without
    bf16 instructions): the update is the same orthogonalisation, within bf16's rounding of torch's."""
    from transformers_scratch.training import optim

    torch.manual_seed(0)
    shapes = [(24, 8), (8, 24), (8, 8)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    stacked, reference = StackedMuon(ours, lr=0.05), torch.optim.Muon(theirs, lr=0.05)
    for p, q in zip(ours, theirs, strict=True):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    dtypes, real = [], optim._newton_schulz
    monkeypatch.setattr(optim, "_newton_schulz", lambda *a: (dtypes.append(a[-1]), real(*a))[1])
    stacked.step(), reference.step()
    assert dtypes and set(dtypes) == {torch.float32}
    for p, q in zip(ours, theirs, strict=True):
        assert not torch.equal(p, q)  # not torch's bf16 arithmetic ...
        assert_close(p, q, rtol=0, atol=2e-3)  # ... but the same update to bf16's precision


def test_muon_is_refused_where_a_grad_scaler_steps_the_optimizer(tmp_path):
    module = LitCharLM(TINY, OptimConfig(optimizer="muon"))
    module.trainer = trainer(tmp_path, max_steps=10)
    with pytest.raises(ValueError, match="muon cannot step under a GradScaler .precision 16-mixed.; use bf16-mixed"):
        build_optimizer(module, module.optim, 10, scaled=True)


def test_warmup_then_cosine_to_the_floor():
    cfg = OptimConfig(warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(0, cfg, 100) == pytest.approx(0.1) and lr_factor(9, cfg, 100) == pytest.approx(1.0)
    assert lr_factor(55, cfg, 100) == pytest.approx(0.55)  # half-way down the cosine
    assert lr_factor(100, cfg, 100) == pytest.approx(0.1) and lr_factor(500, cfg, 100) == pytest.approx(0.1)
    constant = OptimConfig(warmup_steps=10, schedule="constant")
    assert lr_factor(5, constant, 100) == pytest.approx(0.6) and lr_factor(90, constant, 100) == 1.0
    wsd = OptimConfig(warmup_steps=10, schedule="wsd", cooldown=0.2, min_lr_ratio=0.0)  # decays over steps 82..100
    assert lr_factor(9, wsd, 100) == 1.0 and lr_factor(82, wsd, 100) == pytest.approx(1.0)
    assert lr_factor(91, wsd, 100) == pytest.approx(0.5) and lr_factor(100, wsd, 100) == 0.0


def test_cosine_needs_a_length(tmp_path):
    module = LitCharLM(TINY)
    module.trainer = trainer(tmp_path, max_steps=-1, max_epochs=-1)
    with pytest.raises(ValueError, match="cosine schedule needs a length"):
        module.configure_optimizers()
    module.optim = OptimConfig(schedule="constant", warmup_steps=2)  # a constant rate runs for ever
    schedule = module.configure_optimizers()["lr_scheduler"]["scheduler"]
    for _ in range(3):
        schedule.step()
    assert schedule.get_last_lr() == [module.optim.lr, module.optim.lr]


def run_to_deadline(monkeypatch, cfg: OptimConfig, at: float, pace):
    """A Deadline over a stand-in trainer on a simulated clock from 1000 s, each step taking ``pace(step)`` seconds,
    until it stops training: the clock, the trainer, the callback and the optimizer its schedule sets."""
    from types import SimpleNamespace

    from transformers_scratch.training import callbacks

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: clock[0])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg, 10**6))
    trainer = SimpleNamespace(max_steps=10**6, global_step=0, should_stop=False,
                              lr_scheduler_configs=[SimpleNamespace(scheduler=schedule)])  # fmt: skip
    deadline = callbacks.Deadline(at=at, reserve_s=3.0, calibrate_steps=30)
    deadline.on_train_start(trainer, SimpleNamespace(optim=cfg))
    while not trainer.should_stop:
        clock[0] += pace(trainer.global_step)
        trainer.global_step += 1
        optimizer.step()
        schedule.step()
        deadline.on_train_batch_end(trainer, SimpleNamespace(optim=cfg))
    return clock[0], trainer, deadline, optimizer


def test_a_deadline_fits_the_cosine_to_the_time_left_and_stops_before_it(monkeypatch):
    """A run whose steps speed up half-way: the cosine is refitted to the recent pace, so it reaches its floor
    as the time runs out, and training stops when one more step and the save would pass the deadline."""
    cfg = OptimConfig(lr=1.0, warmup_steps=0, min_lr_ratio=0.0)
    clock, trainer, deadline, optimizer = run_to_deadline(monkeypatch, cfg, 1100.0,
                                                          lambda step: 0.1 if step < 400 else 0.05)  # fmt: skip
    assert 1100.0 - 3.0 - 0.05 <= clock + 0.05 and clock + 3.0 <= 1100.0  # stopped at the last whole step
    assert trainer.global_step == 400 + round((97.0 - 40.0) / 0.05)  # the last step that ends by deadline - reserve
    assert deadline.fitted_steps - 40 <= trainer.global_step <= deadline.fitted_steps
    assert optimizer.param_groups[0]["lr"] < 0.01  # the cosine is at its floor when the time is up


def slow_spell(first: int, last: int, seconds: float):
    """A step's seconds: 0.1, but ``seconds`` from step ``first`` to ``last`` (the machine busy meanwhile)."""
    return lambda step: seconds if first <= step <= last else 0.1


SPELLS = {"a-slow-spell-before-the-fit": slow_spell(30, 59, 0.6), "one-stall-before-the-fit": slow_spell(59, 59, 8.0),
          "one-stall-later": slow_spell(200, 200, 8.0)}  # fmt: skip


@pytest.mark.parametrize("pace", SPELLS.values(), ids=SPELLS.keys())
def test_a_deadline_is_not_cut_short_by_a_slow_spell(monkeypatch, pace):
    """Steps that run slow for a while (another process on the machine) just before the schedule is fitted, then
    fast again: the run keeps training to the deadline, with its decay stretched to it. Fitted every 30 steps and
    stopped at the fitted step, a spell of 0.6 s steps from step 30 to 59 once set 83 steps and stopped there,
    11 s before the deadline: the short run of a 45 s speedrun."""
    cfg = OptimConfig(lr=1.0, warmup_steps=0, min_lr_ratio=0.0, schedule="wsd", cooldown=0.4)
    clock, _, _, optimizer = run_to_deadline(monkeypatch, cfg, 1038.0, pace)
    assert 1038.0 - 3.0 - 0.2 <= clock <= 1038.0 - 3.0, clock  # the last whole step before deadline - reserve
    assert optimizer.param_groups[0]["lr"] < 0.01  # the decay ends as the time does


@pytest.mark.parametrize("moment", ["abc", "nan", "inf", "-5", "0"])
def test_a_deadline_that_is_no_moment_is_refused_before_the_run_starts(monkeypatch, moment):
    """TS_DEADLINE is read when the callback is built, before the run claims its folders: a value that is no
    moment (it once raised float()'s message, naming nothing, or trained on to a NaN schedule) names the
    variable; the callback's own settings are bounded as every setting is."""
    from transformers_scratch.training.callbacks import Deadline

    monkeypatch.setenv("TS_DEADLINE", moment)
    with pytest.raises(ValueError, match=r"^TS_DEADLINE=.* is not (finite: pass )?a positive number"):
        Deadline()
    monkeypatch.setenv("TS_DEADLINE", "2000000000.5")
    assert Deadline().at == 2000000000.5
    with pytest.raises(ValueError, match=r"Deadline.calibrate_steps=0 is not an integer in \[1,"):
        Deadline(calibrate_steps=0)
    with pytest.raises(ValueError, match=r"Deadline.reserve_s=-1 is not a non-negative number"):
        Deadline(at=1.0, reserve_s=-1)


@pytest.mark.parametrize(
    "precision, attention", [("32-true", "sdpa"), ("bf16-mixed", "sdpa"), ("bf16-mixed", "reference")]
)
def test_training_lowers_the_loss_and_checkpoints_rebuild_the_model(tmp_path, precision, attention):
    """bf16-mixed runs on a CPU too (Lightning autocasts there), so the GPU default's code path is trained here."""
    module = LitCharLM(replace(TINY, attention=attention), OptimConfig(lr=3e-3, warmup_steps=1))
    ckpt = SafeModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    t = trainer(tmp_path, max_steps=40, callbacks=[ckpt], precision=precision)
    x, y = next(iter(loader()))
    loss = lambda: torch.nn.functional.cross_entropy(module(x).flatten(0, 1), y.flatten()).item()  # noqa: E731
    first = loss()
    t.fit(module, loader())
    assert loss() < first - 1.0
    restored = LitCharLM.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt")  # weights_only, configs allow-listed
    assert_close(restored(x), module(x))


@pytest.mark.slow
def test_compiled_training_writes_checkpoints_that_load_without_compile(tmp_path):
    module = LitCharLM(TINY, OptimConfig(warmup_steps=1), compile=True)
    t = trainer(tmp_path, max_steps=2, callbacks=[SafeModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)])
    t.fit(module, loader())
    assert module.net is not module.model  # it really ran compiled
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in state)
    plain = LitCharLM.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt", compile=False)
    x = next(iter(loader()))[0]
    assert_close(plain(x), module.model(x))


@pytest.mark.parametrize("setting, mode", [(True, None), ("reduce-overhead", "reduce-overhead")])
def test_a_compile_mode_reaches_torch_compile(monkeypatch, setting, mode):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.append(kwargs) or model)
    LitCharLM(TINY, compile=setting).configure_model()
    assert seen == [{"mode": mode}]


@pytest.mark.gpu
def test_training_replayed_as_cuda_graphs_follows_eager_training(tmp_path):
    """compile="reduce-overhead" (CUDA graphs, fused AdamW, the module's own clipping at bf16) takes the steps
    that eager training takes."""
    losses = {}
    for setting in (False, "reduce-overhead"):
        torch.manual_seed(0)
        module = LitCharLM(TINY, OptimConfig(warmup_steps=1), compile=setting)
        t = trainer(tmp_path, accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=8, log_every_n_steps=1,
                    gradient_clip_val=0.5)  # fmt: skip
        t.fit(module, loader(64))
        losses[setting] = t.callback_metrics["train/loss"].item()
        if setting:
            assert module.net is not module.model
    assert losses["reduce-overhead"] == pytest.approx(losses[False], rel=0.02)


def test_non_finite_weights_never_replace_a_good_checkpoint(tmp_path):
    module = LitCharLM(TINY, OptimConfig(warmup_steps=1))
    ckpt = SafeModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    t = trainer(tmp_path, max_steps=4, callbacks=[ckpt])
    t.fit(module, loader())
    good = (tmp_path / "ckpt" / "last.ckpt").read_bytes()
    with torch.no_grad():
        module.model.head.weight[0, 0] = float("nan")  # a step that blew up
    with pytest.raises(TrainingDiverged, match=r"became NaN or infinite .* Last good checkpoint: .*last.ckpt"):
        t.save_checkpoint(tmp_path / "ckpt" / "last.ckpt")  # every save goes through the safe writer
    assert (tmp_path / "ckpt" / "last.ckpt").read_bytes() == good
    assert not [p for p in (tmp_path / "ckpt").iterdir() if p.suffix == ".tmp"]  # no temporary file left


def test_checkpoints_are_written_under_a_temporary_name_then_renamed(tmp_path, monkeypatch):
    """A crash mid-write must leave the previous file whole: the bytes go to a private temporary file in the
    same folder, and only a complete file is renamed over the old one."""
    import os

    module = LitCharLM(TINY, OptimConfig(warmup_steps=1))
    t = trainer(tmp_path, max_steps=1, callbacks=[SafeModelCheckpoint(dirpath=tmp_path / "ckpt")])
    t.fit(module, loader())
    renames = []
    monkeypatch.setattr(os, "replace", lambda src, dst: renames.append((src, dst)) or os.rename(src, dst))
    t.save_checkpoint(tmp_path / "ckpt" / "a.ckpt")
    [(src, dst)] = renames
    assert Path(src).parent == Path(dst).parent and Path(src).name.startswith(".a.ckpt.") and str(src).endswith(".tmp")
    assert not Path(src).exists() and Path(dst).is_file()


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = CausalLM(TINY)
    ckpt = CausalLM(LMConfig(**{**vars(TINY), "activation_checkpointing": True}))
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randint(0, 256, (4, 16))
    for model in (plain, ckpt):
        model(x).logsumexp(-1).mean().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert_close(b.grad, a.grad, msg=name)


def test_flop_count_matches_the_parameter_count():
    cfg = LMConfig(vocab_size=256, context=256, emb=256, heads=8, depth=4)
    model = CausalLM(cfg)
    blocks = sum(p.numel() for name, p in model.named_parameters() if name.startswith("stack.blocks"))
    assert non_embedding_params(cfg) == blocks
    expected = 6 * (blocks + 256 * 256) + 12 * 4 * 256 * 256
    assert train_flops_per_token(cfg, 256) == expected
    assert math.isclose(train_flops_per_token(cfg, 256, output_size=2), expected - 6 * 256 * 254)


@pytest.mark.parametrize(
    "name, peak",
    [("NVIDIA H100 80GB HBM3", 989.4e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA A100-SXM4-80GB", 312e12),
     ("NVIDIA GeForce GTX 1080", None)],
)  # fmt: skip
def test_mfu_peak_is_lightnings_for_the_device(monkeypatch, name, peak):
    """The dense bf16 peaks of the vendors' data sheets, as Lightning keeps them; none on a CPU, and none without
    Lightning's warning for a GPU it does not know (the run says so once, in a note)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert peak_flops("cuda", "bf16-mixed") == pytest.approx(peak)
    assert peak_flops("cpu") is None


def test_a_gpu_of_no_known_peak_is_said_once_to_log_no_mfu(monkeypatch, capsys):
    """An H200 as torch names it, which Lightning's table (h200 sxm1, h200 nvl1) does not match."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    trainer = SimpleNamespace(precision="bf16-mixed", global_step=0)
    Throughput().on_train_start(trainer, SimpleNamespace(device=torch.device("cuda")))
    said = "note: no train/mfu: Lightning keeps no peak FLOPs for NVIDIA H200 at trainer.precision bf16-mixed\n"
    assert capsys.readouterr().err == said


def test_no_sample_under_fsdp(capsys):
    """A sample needs every block on one rank; under FSDP the blocks are sharded, so training says so once and
    goes on (``cli.py sample`` reads the full checkpoint)."""
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    module = LitCharLM(TINY)
    module.model.generate = None  # any call to generate would fail
    trainer = SimpleNamespace(strategy=FSDPStrategy(), sanity_checking=False, is_global_zero=True,
                              datamodule=SimpleNamespace(seed_text=None, vocab=None))  # fmt: skip
    callback = SampleText(length=8)
    callback.on_validation_epoch_end(trainer, module)
    callback.on_validation_epoch_end(trainer, module)
    assert capsys.readouterr().err.count("no samples during FSDP training") == 1


def test_sample_text_continues_a_validation_seed(tmp_path, capsys):
    """The sample callback asks the data for a seed and its vocabulary, and the module's model for the rest; the
    sample is the run's output, on stdout."""
    from transformers_scratch.data import ByteVocab

    class Data(L.LightningDataModule):
        vocab = ByteVocab()

        def train_dataloader(self):
            return loader()

        def val_dataloader(self):
            return loader(8)

        def seed_text(self, length, generator=None):
            return torch.tensor([list(b"seed text!")])[:, :length]

    module = LitCharLM(TINY, OptimConfig(warmup_steps=1))
    t = trainer(tmp_path, max_steps=4, callbacks=[SampleText(length=12, temperature=0, seed_length=4)],
                num_sanity_val_steps=0)  # fmt: skip
    t.fit(module, datamodule=Data())
    sample = capsys.readouterr().out.split("--- sample at step 4 (temperature 0) ---\n")[1].split("\n---")[0]
    assert sample.startswith("[seed]") and len(sample) > len("[seed]")  # the seed, cut to 4, then the model's text


@pytest.mark.parametrize(
    "content", [b"\xff\xfestep\n", b"step," + b"a" * 200_000 + b"\n", b"step\n1\n\n" + b"x" * 200_000]
)
def test_a_resumed_log_that_is_no_csv_is_named_and_kept(tmp_path, content):
    """A resumed run appends to its metrics.csv: one that is not UTF-8, or holds a field past csv's limit (in any
    row: Lightning reads them all again when a column is added), was a traceback; it is named, and left as it was."""
    from transformers_scratch.training.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="run", version=0)
    log = Path(logger.log_dir) / "metrics.csv"
    log.parent.mkdir(parents=True)
    log.write_bytes(content)
    with pytest.raises(ValueError, match=r"metrics.csv', the log this resumed run continues, is no CSV log \(.+\); "
                                         "move it aside, or start another run with --name"):  # fmt: skip
        _ = logger.experiment
    assert log.read_bytes() == content


def test_a_resumed_log_folder_holding_links_is_refused_and_the_files_they_name_kept(tmp_path):
    """A resumed run writes config.yaml, hparams.yaml, metrics.csv and phases.json into its log folder again: a
    link there (a run folder unpacked from elsewhere) had the file it named overwritten."""
    from transformers_scratch.training.loggers import CSVLogger

    folder, precious = tmp_path / "run" / "version_0", tmp_path / "notes.txt"
    folder.mkdir(parents=True)
    precious.write_text("a file of the user's")
    (folder / "config.yaml").symlink_to(precious)
    with pytest.raises(ValueError, match=r"version_0/ holds links or pipes \(config.yaml\), which this run's logs"):
        CSVLogger(tmp_path, name="run", version=0)
    assert precious.read_text() == "a file of the user's"
    (folder / "config.yaml").unlink()
    os.mkfifo(folder / "metrics.csv")  # its writer waited on a reader for ever, deaf to SIGTERM
    with pytest.raises(ValueError, match=r"version_0/ holds links or pipes \(metrics.csv\), which this run's logs"):
        CSVLogger(tmp_path, name="run", version=0)
    CSVLogger(tmp_path, name="run")  # a new version: a folder of its own


def test_throughput_and_mfu_are_logged(tmp_path, monkeypatch):
    """tokens/s on every logging step; MFU where the device's peak is known (here a pretend 1 TFLOP/s)."""
    from lightning.pytorch.loggers import CSVLogger

    monkeypatch.setattr("transformers_scratch.training.callbacks.peak_flops", lambda device, precision: 1e12)
    module = LitCharLM(TINY, OptimConfig(warmup_steps=1))
    t = trainer(tmp_path, max_steps=4, log_every_n_steps=2, logger=CSVLogger(tmp_path), callbacks=[Throughput()])
    t.fit(module, loader())
    log = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    rows = [r for r in csv.DictReader(log) if r["train/mfu"]]
    assert [int(r["step"]) for r in rows] == [1, 3]  # logging steps only
    for r in rows:
        expected = float(r["train/tokens_per_s"]) * train_flops_per_token(TINY, 16) / 1e12
        assert math.isclose(float(r["train/mfu"]), expected, rel_tol=1e-5)


def test_every_logged_tokens_per_second_is_true_the_first_included(tmp_path, monkeypatch):
    """A clock that moves 1 s per training step: every figure must be one batch (8 x 16 tokens) a second. The
    first once counted a step that had not run yet, over no time at all."""
    from lightning.pytorch.loggers import CSVLogger

    clock = [0.0]
    monkeypatch.setattr("transformers_scratch.training.callbacks.time.perf_counter", lambda: clock[0])

    class Tick(L.Callback):
        def on_train_batch_end(self, *args):
            clock[0] += 1.0

    t = trainer(
        tmp_path, max_steps=6, log_every_n_steps=1, logger=CSVLogger(tmp_path), callbacks=[Throughput(), Tick()]
    )
    t.fit(LitCharLM(TINY, OptimConfig(warmup_steps=1)), loader(48))
    log = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    rates = [float(r["train/tokens_per_s"]) for r in csv.DictReader(log) if r.get("train/tokens_per_s")]
    assert len(rates) == 5 and all(rate == 8 * 16 for rate in rates)


def test_gradients_are_clipped_with_a_fused_optimizer_at_bf16(tmp_path, monkeypatch):
    """On a GPU the optimizer is a fused AdamW, whose gradients Lightning's mixed-precision plugin refuses to
    clip ("performs unscaling of gradients internally"): every GPU fit with gradient_clip_val died at its
    first step. Without loss scaling (bf16, fp32) the module clips them itself. A CPU AdamW made fused stands
    in for the GPU's here."""
    real = torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", lambda *args, **kwargs: real(*args, **{**kwargs, "fused": True}))
    norms = []

    class Probe(LitCharLM):
        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    module = Probe(TINY, OptimConfig(warmup_steps=0, schedule="constant"))
    trainer(tmp_path, max_steps=2, precision="bf16-mixed", gradient_clip_val=1e-3).fit(module, loader())
    assert module.optimizers().optimizer.defaults["fused"] is True
    assert len(norms) == 2 and all(n <= 1e-3 * 1.001 for n in norms), norms


def test_wandb_mode_disabled_logs_nothing(tmp_path, monkeypatch):
    """WANDB_MODE=disabled turns W&B off: no offline run is written (Lightning's offline mode would replace
    the setting with "dryrun"), also after an offline run in the same process (W&B reads WANDB_MODE once)."""
    from transformers_scratch.training.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    before = WandbLogger(save_dir=str(tmp_path / "before"))
    before.log_metrics({"x": 1.0}, step=0)
    before.finalize("success")
    before.experiment.finish()
    assert list((tmp_path / "before").rglob("*.wandb"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = WandbLogger(save_dir=str(tmp_path / "logs"))
    logger.log_metrics({"x": 1.0}, step=0)
    logger.finalize("success")
    assert os.environ["WANDB_MODE"] == "disabled"
    assert not list((tmp_path / "logs").rglob("*.wandb"))


def test_a_wandb_mode_that_wandb_does_not_know_is_named(tmp_path, monkeypatch):
    """W&B refused WANDB_MODE=foo at its first logged value with "1 validation error for Settings", after the run
    had started, naming no variable."""
    from transformers_scratch.training.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "foo")
    with pytest.raises(ValueError, match=r"^WANDB_MODE='foo' is none of W&B's modes \(online, offline, dryrun, "):
        WandbLogger(save_dir=str(tmp_path / "logs"))
    assert not (tmp_path / "logs").exists()


def test_wandb_refusing_to_start_a_run_is_one_line(tmp_path, monkeypatch):
    """WANDB_MODE=online with no API key, or a project name W&B refuses: W&B's UsageError was a traceback when the
    run's logging began."""
    from transformers_scratch.cli.errors import error_line
    from transformers_scratch.training.loggers import WandbLogger

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    import wandb

    wandb.finish()  # an earlier test's run, still current in this process, would be reused
    wandb.teardown()
    logger = WandbLogger(save_dir=str(tmp_path / "logs"))
    with pytest.raises(ValueError, match=r"^W&B did not start the run \(No API key .*\); correct the setting it "):
        assert logger.experiment is None  # never reached
    monkeypatch.setenv("WANDB_API_KEY", "abc")  # a key W&B refuses as malformed: its AuthenticationError, no UsageError
    wandb.teardown()
    with pytest.raises(ValueError, match=r"^W&B did not start the run \(WANDB_API_KEY invalid: ") as refused:
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    assert error_line(refused.value, ["fit"]).startswith("WANDB_API_KEY: W&B did not start")
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "a/b")  # a project name W&B refuses, offline too
    wandb.teardown()
    with pytest.raises(ValueError, match=r"^W&B did not start the run \(Invalid project name 'a/b'") as refused:
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    assert error_line(refused.value, ["fit"]).startswith("WANDB_PROJECT: W&B did not start")  # the one error path's
    monkeypatch.delenv("WANDB_PROJECT")
    monkeypatch.setenv("WANDB_RUN_ID", "")  # W&B's words name it, and quote no value
    wandb.teardown()
    with pytest.raises(ValueError, match=r"^W&B did not start the run \(Run ID cannot be empty\)") as refused:
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    assert error_line(refused.value, ["fit"]).startswith("WANDB_RUN_ID: W&B did not start")
    monkeypatch.delenv("WANDB_RUN_ID")
    (tmp_path / "settings").write_bytes(b"\xff[default]\n")  # W&B's own settings file, not UTF-8: named by no one
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path))
    wandb.teardown()
    with pytest.raises(ValueError, match=rf"^W&B could not read its settings file {tmp_path}/settings, which is "):
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    monkeypatch.delenv("WANDB_CONFIG_DIR")
    monkeypatch.setenv("WANDB_CONSOLE", "zzz")  # a value W&B's settings type refuses: pydantic's report was many lines
    wandb.teardown()
    with pytest.raises(ValueError, match=r"^W&B refuses its setting console='zzz' \(Input should be .*\); correct "
                                         r"WANDB_CONSOLE, or unset it$"):  # fmt: skip
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    monkeypatch.delenv("WANDB_CONSOLE")
    monkeypatch.setenv("WANDB_TAGS", "t" * 65)  # W&B reads it as a list, whose text is no longer the variable's
    wandb.teardown()
    with pytest.raises(ValueError, match=r"^W&B refuses its setting run_tags=.*; correct WANDB_TAGS, or unset it$"):
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is None
    wandb.teardown()


@pytest.mark.parametrize("netrc", ["folder", "binary", "malformed"])
def test_a_netrc_that_cannot_be_read_means_no_key_with_a_note(tmp_path, monkeypatch, capsys, netrc):
    """~/.netrc as a folder or binary was a one-line error naming nothing ("Is a directory", a codec's message), and
    the run did not start: it holds no key that W&B could read, so the run logs offline, and says why."""
    from transformers_scratch.training.loggers import _has_credentials

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    if netrc == "folder":
        (tmp_path / ".netrc").mkdir()
    else:
        (tmp_path / ".netrc").write_bytes(b"\xff\xfe\x00" if netrc == "binary" else b"machine api.wandb.ai login")
    assert _has_credentials() is False
    assert "~/.netrc holds no key W&B can read (" in capsys.readouterr().err


@pytest.mark.parametrize("home", ["unset", "unwritable"])
def test_wandbs_service_keeps_its_log_off_the_console_where_the_user_has_no_cache_folder(tmp_path, monkeypatch,
                                                                                         capfd, home):  # fmt: skip
    """With no HOME, or one that cannot be written (a container's user), W&B's service printed its own log on
    stderr, some 15 lines a run ("failed to get logger path"): its log goes into the run's W&B folder instead,
    and the rest of the process sees the user's cache setting as it was."""
    import wandb

    from transformers_scratch.training.loggers import WandbLogger

    for name in ("WANDB_API_KEY", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    if home == "unset":
        monkeypatch.delenv("HOME")
    else:
        (tmp_path / "home").write_text("a file, where a folder would be")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wandb.finish()  # an earlier test's run, and service, would be reused
    wandb.teardown()
    capfd.readouterr()
    try:
        assert WandbLogger(save_dir=str(tmp_path / "logs")).experiment is not None
    finally:
        wandb.finish()
        wandb.teardown()
    assert "XDG_CACHE_HOME" not in os.environ
    assert "logger path" not in capfd.readouterr().err
    assert list((tmp_path / "logs" / "wandb" / "cache" / "wandb" / "logs").glob("core-debug-*"))


def test_wandb_online_with_no_key_or_network_is_refused_before_anything_is_logged(tmp_path, monkeypatch):
    """offline false asks for W&B online; with no key (no WANDB_API_KEY, no ~/.netrc) W&B itself raised a
    UsageError at the first logged value, a traceback after the run had started."""
    from transformers_scratch.training.loggers import WandbLogger

    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    with pytest.raises(ValueError, match="WandbLogger offline false logs online, and this machine has no W&B API key"):
        WandbLogger(save_dir=str(tmp_path / "logs"), offline=False)
