"""The tutorial's BERT section: BERT's masking, the pretraining data, and fine-tuning from its checkpoint."""

import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from transformers_scratch.data import DataError, IMDbMLMDataModule
from transformers_scratch.data.imdb import MaskedBatches, PaddedBatches, mask_tokens
from transformers_scratch.model.config import ClassifierConfig, MaskedLMConfig
from transformers_scratch.model.models import MaskedLM, SequenceClassifier, encoder_state

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import assert_fails_cleanly  # noqa: E402
from test_data import make_aclimdb  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def test_bert_masking_chooses_15_percent_of_real_tokens_then_80_10_10():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 1002, (400, 500), generator=g)
    real = torch.arange(500)[None] < torch.randint(100, 501, (400, 1), generator=g)  # (400, 500), padded rows
    inputs, targets = mask_tokens(ids, real, mask_id=1002, words=range(2, 1002), prob=0.15, generator=g)
    chosen = targets != -100
    assert not (chosen & ~real).any()  # padding is never chosen
    assert abs(chosen.sum() / real.sum() - 0.15) < 0.005
    assert torch.equal(targets[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])  # what is not chosen is left alone
    n = chosen.sum()
    masked = (inputs == 1002) & chosen
    kept = (inputs == ids) & chosen
    swapped = chosen & ~masked & ~kept
    assert abs(masked.sum() / n - 0.8) < 0.01
    assert abs(swapped.sum() / n - 0.1) < 0.01  # random words (a draw of the same word counts as kept: 0.01 %)
    assert abs(kept.sum() / n - 0.1) < 0.01
    assert inputs[swapped].min() >= 2 and inputs[swapped].max() < 1002  # real words, never <pad>, <unk>, [MASK]


def test_every_batch_has_a_token_to_predict():
    ids, real = torch.tensor([[5, 6, 0]]), torch.tensor([[True, True, False]])
    for seed in range(20):
        _, targets = mask_tokens(ids, real, 9, range(2, 9), 0.01, torch.Generator().manual_seed(seed))
        assert (targets != -100).sum() >= 1 and targets[0, 2] == -100


def test_masks_are_a_function_of_the_batch_number():
    ids = [torch.randint(2, 40, (n,), generator=torch.Generator().manual_seed(n)) for n in range(5, 25)]
    padded = PaddedBatches(ids, torch.zeros(20, dtype=torch.long), 4, "length")
    batches = MaskedBatches(padded, mask_id=40, words=range(2, 40), prob=0.3, seed=7)
    for a, b in zip(batches[3], batches[3], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(batches[3][2], MaskedBatches(padded, 40, range(2, 40), 0.3, seed=8)[3][2])


def unlabeled(root: Path, n: int = 20) -> Path:
    folder = root / "train" / "unsup"
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{i}_0.txt").write_text(f"An unlabeled review {i} of a film, neither great nor awful.")
    return root


def test_pretraining_reads_training_and_unlabeled_reviews_never_validation_or_test(tmp_path):
    root = unlabeled(make_aclimdb(tmp_path / "imdb", per_class=6))
    dm = IMDbMLMDataModule(str(root), data_dir=str(tmp_path / "cache"), vocab_words=40, val_size=4, batch_size=3)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.vocab_size == 43 and dm.mask_id == 42  # the classifier's 42 ids, then [MASK]
    seen = set()
    for i in range(len(dm.train_dataloader().dataset)):
        inputs, real, targets = dm.train_dataloader().dataset[i]
        original = torch.where(targets != -100, targets, inputs)
        seen |= {tuple(row[r].tolist()) for row, r in zip(original, real, strict=True)}
    train = {tuple(x.tolist()) for x in dm.splits["train"][0]}
    held_out = {tuple(x.tolist()) for split in ("val", "test") for x in dm.splits[split][0]}
    assert len(dm.unlabeled) == 20 and seen == train | {tuple(x.tolist()) for x in dm.unlabeled}
    assert not seen & held_out
    with pytest.raises(AttributeError):
        dm.num_classes  # noqa: B018 - nothing for the CLI to link into the model


def test_unlabeled_reviews_from_a_device_are_refused_naming_their_flag(tmp_path):
    """data.unlabeled_path, not data.path: the two name files of one kind."""
    root = make_aclimdb(tmp_path / "imdb", per_class=6)
    dm = IMDbMLMDataModule(str(root), data_dir=str(tmp_path / "cache"), vocab_words=40, val_size=4,
                           unlabeled_path="/dev/null")  # fmt: skip
    with pytest.raises(DataError, match="^data.unlabeled_path '/dev/null' is neither a file nor a folder"):
        dm.prepare_data()


def test_unlabeled_reviews_with_no_word_are_left_out_and_none_at_all_is_named(tmp_path):
    """A review of no word (empty, or markup alone) teaches nothing; with no other, the cache of none was written,
    then refused as damaged: "delete it", which rebuilt it."""
    root = unlabeled(make_aclimdb(tmp_path / "imdb", per_class=6), n=3)
    (root / "train/unsup/3_0.txt").write_text("<br /><br />")
    dm = IMDbMLMDataModule(str(root), data_dir=str(tmp_path / "cache"), vocab_words=40, val_size=4)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.unlabeled) == 3
    for review in (root / "train/unsup").iterdir():
        review.write_text("")
    dm = IMDbMLMDataModule(str(root), data_dir=str(tmp_path / "cache2"), vocab_words=40, val_size=4)
    with pytest.raises(DataError, match=f"^data.path '{root}' holds no unlabeled reviews .* with a word in them"):
        dm.prepare_data()


def tiny(cls, **kw):
    return cls(vocab_size=kw.pop("vocab_size"), context=16, emb=16, heads=2, depth=2, pre_norm=False, **kw)


def test_the_pretrained_encoder_starts_the_classifier_and_other_sizes_are_refused():
    torch.manual_seed(0)
    mlm = MaskedLM(tiny(MaskedLMConfig, vocab_size=31))
    ids, chosen = torch.randint(31, (2, 9)), torch.rand(2, 9) < 0.3
    assert_close(mlm(ids, chosen=chosen), mlm(ids)[chosen])  # scoring only the chosen positions changes nothing
    cfg = tiny(ClassifierConfig, vocab_size=30)
    classifier = SequenceClassifier(cfg)
    missing, unexpected = classifier.load_state_dict(encoder_state(mlm.cfg, mlm.state_dict(), cfg), strict=False)
    assert not unexpected and sorted(missing) == ["head.bias", "head.weight"]
    assert torch.equal(classifier.embed.tokens.weight, mlm.embed.tokens.weight[:30])  # [MASK]'s row left out
    assert torch.equal(classifier.stack.blocks[1].ff[0].weight, mlm.stack.blocks[1].ff[0].weight)
    other = tiny(ClassifierConfig, vocab_size=29, pool="cls")
    other.depth = 3
    with pytest.raises(ValueError) as refused:
        encoder_state(mlm.cfg, mlm.state_dict(), other)
    for part in ("depth 3 (pretrained 2)", "vocab_size 29 (pretrained 30 + [MASK])", "pool cls"):
        assert part in str(refused.value)


@pytest.mark.slow
def test_pretraining_then_fine_tuning_end_to_end(tmp_path, cli):
    """cli.py fit with imdb_mlm.yaml on a few reviews, then imdb.yaml + imdb_finetune.yaml from its checkpoint. At
    learning rate 0 fine-tuning moves nothing, so the classifier's encoder is the pretrained one, bit for bit.
    Other sizes and another vocabulary are refused, each with one line. The fine-tuned classifier's attention
    can be drawn."""
    root = unlabeled(make_aclimdb(tmp_path / "imdb", per_class=8))
    small = ["--data.path", str(root), "--data.val_size", "4", "--data.batch_size", "4", "--data.vocab_words", "60",
             "--data.num_workers", "0", "--model.model.depth", "2", "--model.model.emb", "32",
             "--model.model.heads", "2", "--trainer.max_epochs", "1", "--trainer.log_every_n_steps", "1",
             "--trainer.enable_progress_bar", "false"]  # fmt: skip
    pretrain = cli("fit", "--config", str(CONFIGS / "imdb_mlm.yaml"), *small, "--model.optim.warmup_steps", "2",
                   cwd=tmp_path)  # fmt: skip
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    mlm = torch.load(tmp_path / "checkpoints" / "imdb_mlm" / "last.ckpt", weights_only=True)
    assert mlm["global_step"] == 8  # (12 training + 20 unlabeled reviews) / 4
    log = (tmp_path / "logs" / "imdb_mlm" / "version_0" / "metrics.csv").read_text()
    assert "val/loss" in log and "val/acc" in log and "train/loss" in log

    finetune = ["fit", "--config", str(CONFIGS / "imdb.yaml"), "--config", str(CONFIGS / "imdb_finetune.yaml"), *small]
    result = cli(*finetune, "--model.optim.lr", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "model.pretrained: the weights of checkpoints/imdb_mlm/last.ckpt start this run" in result.stderr
    tuned = torch.load(tmp_path / "checkpoints" / "imdb_finetune" / "last.ckpt", weights_only=True)["state_dict"]
    for name, value in mlm["state_dict"].items():
        if name.startswith("model.stack."):
            assert torch.equal(tuned[name], value), name
    assert torch.equal(tuned["model.embed.tokens.weight"], mlm["state_dict"]["model.embed.tokens.weight"][:62])

    deeper = cli(*finetune, "--model.model.depth", "3", "--name", "deeper", cwd=tmp_path)
    assert_fails_cleanly(deeper, "model depth 3 (pretrained 2)")
    other_words = cli(*finetune, "--data.seed", "5", "--name", "other", cwd=tmp_path)
    assert_fails_cleanly(other_words, "the checkpoint's vocabulary (")
    assert not list((tmp_path / "checkpoints" / "other").glob("*.ckpt"))

    drawn = cli("attention", "--ckpt_path", "checkpoints/imdb_finetune/last.ckpt", "--text", "A great film, not awful.",
                "--out", "a.png", cwd=tmp_path)  # fmt: skip
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert "2 layers x 2 heads over 7 words" in drawn.stdout and (tmp_path / "a.png").stat().st_size > 0


@pytest.mark.slow
def test_fine_tuning_names_a_missing_or_foreign_checkpoint(tmp_path, cli):
    root = make_aclimdb(tmp_path / "imdb", per_class=4)
    args = ["fit", "--config", str(CONFIGS / "imdb.yaml"), "--config", str(CONFIGS / "imdb_finetune.yaml"),
            "--data.path", str(root), "--data.val_size", "2", "--data.vocab_words", "30"]  # fmt: skip
    missing = cli(*args, "--model.pretrained", "nowhere.ckpt", cwd=tmp_path)
    assert_fails_cleanly(missing, "model.pretrained 'nowhere.ckpt' does not exist")
    (tmp_path / "cut.ckpt").write_bytes(b"PK\x03\x04 truncated")
    broken = cli(*args, "--model.pretrained", "cut.ckpt", cwd=tmp_path)
    assert_fails_cleanly(broken, "model.pretrained 'cut.ckpt' is not a readable checkpoint")
    (tmp_path / "text.txt").write_text("the cat sat on a mat while one dog ran far away. " * 200)
    lm = cli("fit", "--config", str(CONFIGS / "tiny_charlm.yaml"), "--data.path", "text.txt", "--trainer.max_steps",
             "1", "--trainer.logger", "false", "--sample.length", "0", cwd=tmp_path)  # fmt: skip
    assert lm.returncode == 0, lm.stderr[-3000:]
    foreign = cli(*args, "--model.pretrained", "checkpoints/tiny_charlm/last.ckpt", cwd=tmp_path)
    assert_fails_cleanly(foreign, "holds a LitCharLM; fine-tuning takes LitMaskedLM")
    hollow = {"hyper_parameters": {"_class_path": "transformers_scratch.training.LitMaskedLM", "model": {}}}
    torch.save(hollow, tmp_path / "hollow.ckpt")  # a LitMaskedLM's settings, no weights
    empty = cli(*args, "--model.pretrained", "hollow.ckpt", cwd=tmp_path)
    assert_fails_cleanly(empty, "model.pretrained 'hollow.ckpt' holds no model weights")


def test_fine_tuning_names_a_pretrained_checkpoint_of_a_newer_layout(tmp_path):
    from transformers_scratch.training.modules import read_pretrained

    newer = {"hyper_parameters": {"_class_path": "transformers_scratch.training.LitMaskedLM",
                                  "model": {"emb": 16, "heads": 2, "rope_theta": 1e4}},
             "state_dict": {"model.x": torch.zeros(1)}}  # fmt: skip
    torch.save(newer, tmp_path / "newer.ckpt")
    with pytest.raises(ValueError, match="model.pretrained '.*newer.ckpt' has a model setting 'rope_theta' that "
                                         "this version's MaskedLMConfig lacks"):  # fmt: skip
        read_pretrained(str(tmp_path / "newer.ckpt"), ClassifierConfig(emb=16, heads=2))


@pytest.mark.slow
def test_a_language_model_trains_in_stages_from_a_shorter_dense_run(tmp_path, cli):
    """Shortformer's staged training: a rope model at a window of 32, then the same weights at 64 with a sparse
    pattern (model.pretrained). At learning rate 0 the second stage moves nothing, so its weights are the first's,
    bit for bit. Learned positions cannot grow: refused in one line, before anything is written."""
    (tmp_path / "text.txt").write_text("the cat sat on a mat while one dog ran far away. " * 400)
    args = ["fit", "--config", str(CONFIGS / "tiny_charlm.yaml"), "--data.path", "text.txt", "--trainer.max_steps",
            "2", "--trainer.logger", "false", "--sample.length", "0", "--trainer.limit_val_batches", "1",
            "--model.model.depth", "1", "--model.model.emb", "32"]  # fmt: skip
    short = cli(*args, "--data.context", "32", "--model.model.positions", "rope", "--name", "short", cwd=tmp_path)
    assert short.returncode == 0, short.stderr[-3000:]
    first = "checkpoints/short/last.ckpt"
    long = ["--data.context", "64", "--model.model.sparse", "{block: 8}", "--model.pretrained", first]
    staged = cli(*args, "--model.model.positions", "rope", *long, "--model.optim.lr", "0", "--name", "long",
                 cwd=tmp_path)  # fmt: skip
    assert staged.returncode == 0, staged.stderr[-3000:]
    assert f"model.pretrained: the weights of {first} start this run" in staged.stderr
    before = torch.load(tmp_path / first, weights_only=True)["state_dict"]
    after = torch.load(tmp_path / "checkpoints/long/last.ckpt", weights_only=True)
    assert after["global_step"] == 2 and after["hyper_parameters"]["model"]["sparse"]["block"] == 8
    assert before.keys() == after["state_dict"].keys()
    assert all(torch.equal(before[k], after["state_dict"][k]) for k in before)

    learned = cli(*args, *long, "--name", "learned", cwd=tmp_path)
    assert_fails_cleanly(learned, "model.pretrained 'checkpoints/short/last.ckpt' does not fit the LitCharLM")
    assert "for a longer window, positions other than learned" in learned.stderr
    assert not (tmp_path / "checkpoints" / "learned").exists()


@pytest.mark.slow
@pytest.mark.parametrize("config", ["tiny_charlm", "shakespeare_xl", "tiny_imdb", "imdb_mlm", "seq2seq_add"])
def test_each_module_declares_the_metrics_its_validation_logs(tmp_path, monkeypatch, config):
    """The CLI refuses a monitored metric that the model's validation does not log before anything is written,
    from the module's ``val_metrics``: here they are what one validation logs."""
    from test_cli import corpus

    from transformers_scratch.cli import build_cli

    monkeypatch.chdir(tmp_path)
    if config in ("tiny_charlm", "shakespeare_xl"):
        data = ["--data.path", str(corpus(tmp_path / "text.txt", 20_000))]
    elif config != "seq2seq_add":
        data = ["--data.path", str(unlabeled(make_aclimdb(tmp_path / "imdb"))), "--data.val_size", "4"]
    else:
        data = []
    run = build_cli(["--config", str(CONFIGS / f"{config}.yaml"), *data, "--model.model.emb", "32",
                     "--model.model.depth", "1", "--model.model.heads", "2", "--trainer.logger", "false",
                     "--trainer.limit_val_batches", "1"], run=False)  # fmt: skip
    run.trainer.validate(run.model, datamodule=run.datamodule, verbose=False)
    logged = {key for key in run.trainer.callback_metrics if key.startswith("val/")}
    assert logged == set(run.model.val_metrics)
