"""Hugging Face weights in and out: small models of each family, built from their config classes with every
parameter redrawn, saved with save_pretrained, loaded with from_hf and compared; and exports that
``transformers`` loads with the same logits. No network: local folders only."""

import json
import re
from pathlib import Path

import pytest
import torch

from transformers_scratch.model import CausalLM, LMConfig
from transformers_scratch.model.attention import ATTENTION, Attend, MultiHeadAttention
from transformers_scratch.model.config import MaskedLMConfig
from transformers_scratch.model.hf import HFError, from_hf, save_hf
from transformers_scratch.model.models import MaskedLM, SequenceClassifier
from transformers_scratch.model.pretrained import save_pretrained

transformers = pytest.importorskip("transformers")  # the optional extra: pip install -e ".[hf]"

TOL = 1e-4


def redraw(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn anew (biases and norm gains too), so no mapping can hide behind zeros or ones."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = p.dim() == 1 and (
                "norm" in name.lower() or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
            )
            p.copy_((1.0 if gain else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def saved(model, folder):
    model.save_pretrained(folder)
    return folder


def set_kernel(model, impl: str):
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.attend = Attend(ATTENTION[impl])
    return model


def gpt2(**overrides):
    sizes = dict(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0)  # fmt: skip
    cfg = transformers.GPT2Config(**{**sizes, **overrides})
    return redraw(transformers.GPT2LMHeadModel(cfg))


def llama(family: str = "llama", **overrides):
    classes = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
               "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}  # fmt: skip
    config_class, model_class = classes[family]
    cfg = config_class(vocab_size=103, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=500.0,
                       tie_word_embeddings=False, **overrides)  # fmt: skip
    return redraw(model_class(cfg))


def bert(model_class="BertForMaskedLM"):
    cfg = transformers.BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    return redraw(getattr(transformers, model_class)(cfg))


@pytest.mark.parametrize("impl", ["sdpa", "reference"])
@pytest.mark.parametrize("make", [gpt2, llama, lambda: llama("qwen2"), lambda: gpt2(activation_function="gelu")],
                         ids=["gpt2", "llama-gqa", "qwen2", "gpt2-exact-gelu"])  # fmt: skip
def test_a_causal_family_loads_exactly(tmp_path, make, impl):
    theirs = make()
    ours = set_kernel(from_hf(saved(theirs, tmp_path / "hf")), impl)
    assert isinstance(ours, CausalLM)
    ids = torch.randint(0, theirs.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(ids) - theirs(ids).logits).abs().max() <= TOL
    prompt = ids[:, :5]
    greedy = theirs.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    for use_cache in (True, False):
        assert torch.equal(ours.generate(prompt, 12, temperature=0.0, use_cache=use_cache), greedy)


@pytest.mark.parametrize("impl", ["sdpa", "reference"])
def test_bert_masked_lm_loads_exactly_with_padding_and_token_types(tmp_path, impl):
    theirs = bert()
    ours = set_kernel(from_hf(saved(theirs, tmp_path / "hf")), impl)
    assert isinstance(ours, MaskedLM) and ours.cfg.head_transform and ours.cfg.embed_norm
    g = torch.Generator().manual_seed(2)
    ids, types = torch.randint(0, 101, (3, 19), generator=g), torch.randint(0, 2, (3, 19), generator=g)
    mask = torch.ones(3, 19, dtype=torch.bool)
    mask[1, 12:], mask[2, 5:] = False, False  # padding
    with torch.no_grad():
        expected = theirs(ids, attention_mask=mask.long(), token_type_ids=types).logits
        assert (ours(ids, mask, types=types) - expected).abs().max() <= TOL
        assert (ours(ids, mask) - theirs(ids, attention_mask=mask.long()).logits).abs().max() <= TOL  # types: 0


def test_a_bert_encoder_starts_the_classifier(tmp_path):
    theirs = bert("BertModel")
    ours = from_hf(saved(theirs, tmp_path / "hf"), num_classes=3)
    assert isinstance(ours, SequenceClassifier) and ours.head.out_features == 3
    ids = torch.randint(0, 101, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        hidden = theirs(ids).last_hidden_state
        assert (ours.stack(ours.embed(ids)) - hidden).abs().max() <= TOL
    from_hf(saved(bert(), tmp_path / "mlm"), num_classes=2)  # the encoder of a masked LM serves as well


def test_from_hf_takes_a_model_object():
    theirs = gpt2()
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        assert (from_hf(theirs)(ids) - theirs(ids).logits).abs().max() <= TOL


def test_weights_of_integers_are_refused_naming_the_folder(tmp_path):
    """An integer tensor was cast into the float weights, each weight cut to a whole number: a damaged folder."""
    from safetensors.torch import load_file, save_file

    weights = saved(gpt2(), tmp_path / "hf") / "model.safetensors"
    state = load_file(weights)
    save_file({**state, "transformer.h.1.mlp.c_fc.weight": state["transformer.h.1.mlp.c_fc.weight"].int()}, weights)
    with pytest.raises(HFError, match=r"'[^']*hf' holds 'stack.blocks.1.ff.0.weight' as torch.int32, not as weights"):
        from_hf(tmp_path / "hf")


def test_weights_of_nan_or_inf_are_refused_naming_the_folder_or_the_model(tmp_path):
    """A folder whose weights hold NaN or inf is damaged: fine-tuning it would be a "diverged" run at its first step."""
    theirs = gpt2()
    theirs.transformer.h[1].attn.c_attn.weight.data[0, 0] = float("inf")
    with pytest.raises(HFError, match=r"'[^']*hf' holds weights that are not finite \('stack.blocks.1.attn"):
        from_hf(saved(theirs, tmp_path / "hf"))
    with pytest.raises(HFError, match="^the model holds weights that are not finite"):
        from_hf(theirs)


# ---- out: exports that transformers loads ------------------------------------------------------------
EXPORTABLE = {
    "tutorial-default-gpt2": LMConfig(vocab_size=256, context=32, emb=32, heads=4, depth=2),
    "first-run-gelu-tied": LMConfig(
        vocab_size=256, context=32, emb=32, heads=4, depth=2, activation="gelu", tie_weights=True
    ),  # fmt: skip
    "llama-gqa": LMConfig(
        vocab_size=200,
        context=48,
        emb=32,
        heads=4,
        kv_heads=2,
        depth=2,
        positions="rope",
        norm="rms",
        activation="swiglu",
        bias=False,
        ff_hidden=40,
        rope_base=1000.0,
    ),  # fmt: skip
    "qwen2": LMConfig(
        vocab_size=200,
        context=48,
        emb=32,
        heads=4,
        depth=2,
        positions="rope",
        norm="rms",
        activation="swiglu",
        bias=False,
        qkv_bias=True,
    ),  # fmt: skip
}


def test_an_export_goes_where_a_killed_one_left_its_temporary_files(tmp_path):
    """A killed export left ``.model.safetensors.*.tmp``: a folder that looked empty was refused as not empty."""
    for folder, save in ((tmp_path / "hf", save_hf), (tmp_path / "ours", save_pretrained)):
        folder.mkdir()
        (folder / ".model.safetensors.0a1b2c3d.tmp").write_bytes(b"half")
        save(CausalLM(EXPORTABLE["tutorial-default-gpt2"]), folder)
        assert sorted(f.name for f in folder.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("cfg", EXPORTABLE.values(), ids=EXPORTABLE.keys())
def test_an_export_loads_in_transformers_with_the_same_logits(tmp_path, cfg):
    ours = redraw(CausalLM(cfg), seed=4)
    save_hf(ours, tmp_path / "out")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    for where in (written, theirs.config.to_dict(), theirs.generation_config.to_dict()):  # ids that exist, or none
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            assert where.get(key) is None or 0 <= where[key] < cfg.vocab_size, (key, where.get(key))
    ids = torch.randint(0, cfg.vocab_size, (2, 21), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (theirs(ids).logits - ours(ids)).abs().max() <= TOL
    again = from_hf(tmp_path / "out")  # and back
    with torch.no_grad():
        assert (again(ids) - ours(ids)).abs().max() <= TOL


def test_a_masked_lm_exports_as_bert(tmp_path):
    cfg = MaskedLMConfig(vocab_size=90, context=24, emb=32, heads=4, depth=2, pre_norm=False, activation="gelu",
                         embed_norm=True, head_transform=True, norm_eps=1e-12)  # fmt: skip
    ours = redraw(MaskedLM(cfg), seed=6)
    save_hf(ours, tmp_path / "out")
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 90, (2, 13))
    with torch.no_grad():
        assert (theirs(ids).logits - ours(ids)).abs().max() <= TOL


@pytest.mark.parametrize("cfg, option", [
    (LMConfig(context=16, emb=32, heads=4, depth=1, positions="sinusoidal"), "positions sinusoidal"),
    (LMConfig(context=16, emb=32, heads=4, depth=1, pre_norm=False), "pre_norm false"),
    (LMConfig(context=16, emb=32, heads=4, depth=1, positions="rope"), "norm layer, activation relu"),
])  # fmt: skip
def test_an_export_no_family_expresses_is_refused_naming_the_option(tmp_path, cfg, option):
    with pytest.raises(HFError, match=f"model {option}.* has no counterpart"):
        save_hf(CausalLM(cfg), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- hostile folders: one line each ------------------------------------------------------------------
def edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_hostile_folders_are_refused_in_one_line(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = saved(gpt2(), tmp_path / "hf")
    weights = load_file(folder / "model.safetensors")

    def refused(match):
        with pytest.raises(HFError, match=match) as e:
            from_hf(folder)
        assert str(folder) in str(e.value) and "\n" not in str(e.value)  # which folder, of several in play

    edit_config(folder, n_embd=1024, n_layer=24)  # 302M parameters declared, a few thousand present
    refused(r"declares .* parameters or more .* does not match its weights")  # before any allocation
    edit_config(folder, n_embd=10**9, n_layer=10**6)  # sizes no config takes: refused by the config itself
    refused(r"config.json: model emb=1000000000 is not an integer in \[1, 16,777,216\]")
    edit_config(folder, n_embd=32, n_layer=2, n_positions=-4)
    refused(r"config.json: model context=-4 is not an integer in \[1, 16,777,216\]")
    edit_config(folder, n_positions=32.0)  # a number that is no integer, or text
    refused(r"config.json's n_positions='32.0' is not an integer")
    edit_config(folder, n_positions="32")
    refused(r"config.json's n_positions='32' is not an integer")
    edit_config(folder, n_positions=32, model_type="t5")
    refused("model_type 't5' is not one of gpt2, bert, llama, qwen2")
    edit_config(folder, model_type="gpt2", n_layer=1)
    refused(r"unexpected \['h.1.attn.c_attn.bias'")  # extra keys
    edit_config(folder, n_layer=2)
    save_file({k: v for k, v in weights.items() if "h.1.ln_2" not in k}, folder / "model.safetensors")
    refused(r"missing \['h.1.ln_2.bias'")
    weights["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(32, 100)
    save_file(weights, folder / "model.safetensors")
    refused(r"h.0.mlp.c_fc.weight has shape \[32, 100\], and config.json's sizes give \[128, 32\]")
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")
    refused("holds pickled weights only .pytorch_model.bin., which this project never unpickles")
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header")
    refused("is not a readable safetensors file")
    (folder / "config.json").write_bytes(b"\xff\xfe binary")
    refused("is not JSON")
    with pytest.raises(HFError, match="is not a folder"):
        from_hf(str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    "make, key, value",
    [(gpt2, "scale_attn_by_inverse_layer_idx", True), (gpt2, "scale_attn_weights", False),
     (bert, "position_embedding_type", "relative_key"), (llama, "hidden_act", "gelu"),
     (lambda: llama("qwen2"), "use_sliding_window", True)],
)  # fmt: skip
def test_a_setting_the_family_fixes_is_refused_when_it_says_otherwise(tmp_path, make, key, value):
    """What a family's table fixes is written on export and checked on import: another value maps to nothing."""
    folder = saved(make(), tmp_path / "hf")
    edit_config(folder, **{key: value})
    with pytest.raises(HFError, match=f"config.json's {key}={str(value)!r} has no counterpart here"):
        from_hf(folder)


@pytest.mark.parametrize("make, changes, message", [
    (llama, {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}},
     "config.json's rope type 'linear' is not plain RoPE; only rope_type default maps"),
    (llama, {"rope_parameters": {"rope_type": "default", "rope_theta": -1.0}},
     "config.json's rope_theta='-1.0' is not a positive number"),
    (llama, {"head_dim": 16}, "config.json's head_dim=16 is not hidden_size / num_attention_heads"),
    (llama, {"attention_bias": True}, "config.json's attention_bias=True and mlp_bias=False differ"),
    (gpt2, {"activation_function": "swish"}, "config.json's activation_function='swish' has no counterpart here"),
    (gpt2, {"activation_function": ["gelu"]}, "config.json's activation_function=\"['gelu']\" has no counterpart"),
    (gpt2, {"model_type": ["gpt2"]}, "config.json's model_type \"['gpt2']\" is not one of gpt2, bert"),
    (gpt2, {"layer_norm_epsilon": "x"}, "config.json's layer_norm_epsilon='x' is not a number"),
    (bert, {"layer_norm_eps": [1]}, "config.json's layer_norm_eps='[1]' is not a number"),
    (gpt2, {"tie_word_embeddings": "false"}, "config.json's tie_word_embeddings='false' is not true or false"),  # was
    (llama, {"attention_bias": "false", "mlp_bias": "false"}, "attention_bias='false' is not true or false"),  # True
    (llama, {"num_key_value_heads": "2"}, "config.json's num_key_value_heads='2' is not an integer"),
])  # fmt: skip
def test_a_config_json_that_maps_to_no_model_here_names_the_setting(tmp_path, make, changes, message):
    folder = saved(make(), tmp_path / "hf")
    edit_config(folder, **changes)
    with pytest.raises(HFError, match=re.escape(message)):
        from_hf(folder)


@pytest.mark.parametrize("missing, message", [("config.json", "holds no config.json"),
                                              ("model.safetensors", "holds no *.safetensors weights")])  # fmt: skip
def test_a_folder_missing_a_file_of_the_layout_is_refused_naming_it(tmp_path, missing, message):
    folder = saved(gpt2(), tmp_path / "hf")
    (folder / missing).unlink()
    with pytest.raises(HFError, match=re.escape(f"'{folder}' {message}; pass a Hugging Face model's folder (")):
        from_hf(folder)
    (tmp_path / "lm.ckpt").write_bytes(b"PK")  # a file where a folder goes: a checkpoint, say
    with pytest.raises(HFError, match=re.escape(f"'{tmp_path}/lm.ckpt' is not a folder (or a hub name); pass a Hug")):
        from_hf(tmp_path / "lm.ckpt")


def test_weights_that_are_a_named_pipe_are_not_read(tmp_path, waiting_pipe):
    folder = saved(gpt2(), tmp_path / "hf")
    (folder / "model.safetensors").unlink()
    waiting_pipe(folder / "model.safetensors", "a pipe")  # safetensors' reader would wait on it for ever
    with pytest.raises(HFError, match=re.escape(f"'{folder}' holds no *.safetensors weights")):
        from_hf(folder)


def test_init_from_a_model_of_another_kind_or_smaller_than_the_data_names_the_fix(tmp_path):
    from transformers_scratch.model.config import ClassifierConfig
    from transformers_scratch.training.modules import LitCharLM, LitClassifier, pretrained_model

    folder = str(saved(gpt2(), tmp_path / "hf"))  # 97 ids, 32 positions
    sizes = dict(emb=32, heads=4, depth=1)
    classifier = ClassifierConfig(vocab_size=97, context=32, num_classes=2, **sizes)
    with pytest.raises(ValueError, match="holds a CausalLM and LitClassifier fine-tunes a SequenceClassifier: start"):
        pretrained_model(LitClassifier(classifier), folder, classifier)
    lm = LMConfig(vocab_size=200, context=16, **sizes)
    with pytest.raises(ValueError, match="reads 97 ids and 32 positions, and the data gives 200 ids in windows of 16"):
        pretrained_model(LitCharLM(lm), folder, lm)


def test_this_projects_own_export_is_named_as_such_with_the_reader_to_use(tmp_path):
    from transformers_scratch.model.pretrained import save_pretrained

    save_pretrained(CausalLM(LMConfig(vocab_size=16, context=8, emb=16, heads=2, depth=1)), tmp_path / "ours")
    with pytest.raises(HFError, match="this project's export of a CausalLM, not a Hugging Face model's: from_pretr"):
        from_hf(tmp_path / "ours")


def test_a_hub_name_with_no_hub_gets_one_line_with_the_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as with no network, without waiting for one
    with pytest.raises(HFError) as e:
        from_hf("nobody-here/no-model")
    message = str(e.value)
    assert message.startswith("'nobody-here/no-model' is no folder here, and the Hugging Face Hub did not give it")
    assert "pass a local folder written by save_pretrained" in message and "\n" not in message


# ---- the command line --------------------------------------------------------------------------------
def test_export_format_hf_through_the_cli_and_its_refusal(tmp_path, capsys, monkeypatch):
    from test_reliability import write_checkpoint

    from transformers_scratch.cli import main
    from transformers_scratch.training import LitCharLM, LitMaskedLM

    monkeypatch.chdir(tmp_path)
    module = redraw(LitCharLM(LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=2, activation="gelu")))
    ckpt = write_checkpoint(tmp_path / "lm.ckpt", module, {"vocab_symbols": None})
    main(["export", "--ckpt_path", str(ckpt), "--out", "hf", "--format", "hf"])
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert (theirs(ids).logits - module.model(ids)).abs().max() <= TOL
    sinusoidal = LitCharLM(LMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=1, positions="sinusoidal"))
    write_checkpoint(tmp_path / "sin.ckpt", sinusoidal, {"vocab_symbols": None})
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", "sin.ckpt", "--out", "hf2", "--format", "hf"])
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "error: --ckpt_path 'sin.ckpt': model positions sinusoidal has no " in err
    assert err.rstrip().splitlines()[0].endswith("export it, or export it with --format project")
    assert not (tmp_path / "hf2").exists()
    masked = LitMaskedLM(MaskedLMConfig(vocab_size=256, context=16, emb=32, heads=4, depth=1))  # the project's
    write_checkpoint(tmp_path / "mlm.ckpt", masked, {"vocab_symbols": None})  # format takes no LitMaskedLM
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", "mlm.ckpt", "--out", "hf2", "--format", "hf"])
    assert "has no counterpart in BERT" in (err := capsys.readouterr().err) and "--format project" not in err

    def dies(tensors, path, metadata=None) -> None:  # a write that stops part-way: a full disk, or a kill
        Path(path).write_bytes(b"half the weights")
        raise OSError(28, "No space left on device")

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", dies)
    with pytest.raises(SystemExit):
        main(["export", "--ckpt_path", str(ckpt), "--out", "hf3", "--format", "hf"])
    assert "No space left on device" in capsys.readouterr().err
    assert list((tmp_path / "hf3").iterdir()) == []  # no half-written file under its name, nor beside it


def trained_tokenizer(text: str, folder, size: int = 300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text], trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


@pytest.mark.slow
def test_fit_fine_tunes_a_gpt2_folder_with_its_tokenizer_and_sample_decodes(tmp_path, capsys, monkeypatch):
    from test_cli import TINY_LM

    from transformers_scratch.cli import main

    monkeypatch.chdir(tmp_path)
    text = "the cat sat on a mat while one dog ran far away to see its friend. " * 300
    (tmp_path / "text.txt").write_text(text)
    folder = tmp_path / "gpt2"
    folder.mkdir()
    tokenizer = trained_tokenizer(text, folder)
    saved(gpt2(vocab_size=tokenizer.get_vocab_size()), folder)
    main(["fit", "--config", TINY_LM, "--data.path", "text.txt", "--model.init_from", str(folder),
          "--data.tokenizer", str(folder), "--data.context", "16", "--trainer.max_steps", "4",
          "--data.batches_per_epoch", "2", "--trainer.limit_val_batches", "2", "--sample.length", "0",
          "--trainer.logger", "false", "--name", "tuned"])  # fmt: skip
    checkpoint = torch.load("checkpoints/tuned/last.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["model"]["activation"] == "gelu_tanh"  # the folder's architecture
    assert checkpoint["hyper_parameters"]["init_from"] is None  # reloads without the folder
    weights = (folder / "model.safetensors").rename(tmp_path / "aside.safetensors")  # a resume with the same flags
    main(["fit", "--config", TINY_LM, "--data.path", "text.txt", "--model.init_from", str(folder),
          "--data.tokenizer", str(folder), "--data.context", "16", "--trainer.max_steps", "6",
          "--data.batches_per_epoch", "2", "--trainer.limit_val_batches", "2", "--sample.length", "0",
          "--trainer.logger", "false", "--name", "tuned", "--ckpt_path", "last"])  # fmt: skip
    assert torch.load("checkpoints/tuned/last.ckpt", weights_only=True)["global_step"] == 6  # read no folder
    weights.rename(folder / "model.safetensors")
    capsys.readouterr()
    main(["sample", "--ckpt_path", "checkpoints/tuned/last.ckpt", "--prompt", "the cat", "--length", "5"])
    out = capsys.readouterr().out
    assert out.startswith("the cat") and len(out) > len("the cat")
    for format in ("hf", "project"):  # the tokenizer goes with the weights, for transformers or --data.tokenizer
        main(["export", "--ckpt_path", "checkpoints/tuned/last.ckpt", "--out", format, "--format", format])
        assert (tmp_path / format / "tokenizer.json").read_text() == (folder / "tokenizer.json").read_text()
    assert json.loads((tmp_path / "project/config.json").read_text())["vocab"] == {"tokenizer": "tokenizer.json"}
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tokenizer("the cat").input_ids == tokenizer.encode("the cat").ids
    main(["attention", "--ckpt_path", "checkpoints/tuned/last.ckpt", "--text", "the cat", "--out", "a.png"])
    assert f"over {len(tokenizer.encode('the cat').ids)} tokens" in capsys.readouterr().out  # not characters
    from test_reliability import fails

    other = tmp_path / "other"
    other.mkdir()
    trained_tokenizer(text, other, size=280)  # a resume, or a score, with another tokenizer: its ids mean other text
    tested = ["test", "--config", TINY_LM, "--data.path", "text.txt", "--data.context", "16", "--ckpt_path",
              "checkpoints/tuned/last.ckpt", "--trainer.logger", "false"]  # fmt: skip
    fails(capsys, *tested, "--data.tokenizer", str(other), message=f"not trained with data.tokenizer {str(other)!r}")
    main(tested)  # the checkpoint's tokenizer: the protocol counts its tokens
    assert "test/bpc: contiguous windows of 16 tokens (each token sees 0..15 earlier tokens)" in capsys.readouterr().err
    scored = ["predict", *tested[1:], "--data.predict_path"]
    main([*scored, "text.txt"])  # the checkpoint's tokenizer, with no --data.tokenizer: its ids are tokens
    assert re.search(r"text.txt: [\d.]+ bits per token over [\d,]+ tokens\n", capsys.readouterr().out)
    (tmp_path / "short.txt").write_text("the cat sat on a mat while one dog ran")  # 38 bytes, fewer tokens
    fails(capsys, *scored, "short.txt", message="'short.txt' holds 10 tokens, fewer than one window of data.con")
    fails(capsys, "fit", "--config", TINY_LM, "--data.path", "short.txt", "--data.tokenizer", str(folder), "--name",
          "short", message="train split of 'short.txt' holds 9 tokens (the file has 10, split")  # fmt: skip

    edit_config(folder, model_type="mamba")  # a broken folder: the flag, the folder and the reason, on one line
    fails(capsys, "fit", "--config", TINY_LM, "--data.path", "text.txt", "--model.init_from", str(folder),
          "--data.tokenizer", str(folder), "--name", "broken",
          message=f"model.init_from {str(folder)!r}: config.json's model_type 'mamba' is not one of")  # fmt: skip
    damaged = gpt2(vocab_size=tokenizer.get_vocab_size())  # NaN weights: not a run that diverged at its first step
    damaged.transformer.h[0].mlp.c_fc.weight.data[0, 0] = float("nan")
    saved(damaged, folder)
    fails(capsys, "fit", "--config", TINY_LM, "--data.path", "text.txt", "--model.init_from", str(folder),
          "--data.tokenizer", str(folder), "--name", "broken", message=f"model.init_from {str(folder)!r} holds "
          "weights that are not finite ('stack.blocks.0.ff.0.weight': NaN or inf)")  # fmt: skip


def test_the_imdb_classifier_starts_from_a_bert_encoder_with_its_tokenizer(tmp_path, capsys, monkeypatch, recwarn):
    from test_cli import TINY_IMDB
    from test_data import make_aclimdb
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from transformers_scratch.cli import main

    monkeypatch.chdir(tmp_path)
    root = make_aclimdb(tmp_path / "imdb", per_class=4)
    folder = tmp_path / "bert"
    folder.mkdir()
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    words = "great wonderful superb loved awful boring terrible hated the film was a movie and it"
    tokenizer.train_from_iterator(
        [words] * 10, trainers.WordPieceTrainer(vocab_size=120, special_tokens=["[PAD]", "[UNK]"])
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    theirs = bert("BertModel")
    theirs.resize_token_embeddings(tokenizer.get_vocab_size())
    saved(theirs, folder)
    main(["fit", "--config", TINY_IMDB, "--data.path", str(root), "--model.init_from", str(folder),
          "--data.tokenizer", str(folder), "--data.max_length", "32", "--data.val_size", "2", "--trainer.max_steps",
          "2", "--trainer.logger", "false", "--name", "bert_imdb"])  # fmt: skip
    checkpoint = torch.load("checkpoints/bert_imdb/last.ckpt", weights_only=True)
    assert (
        checkpoint["hyper_parameters"]["model"]["embed_norm"]
        and not checkpoint["hyper_parameters"]["model"]["pre_norm"]
    )
    embeddings = checkpoint["state_dict"]["model.embed.tokens.weight"]
    assert embeddings.shape == (tokenizer.get_vocab_size(), 32)
    (tmp_path / "reviews.txt").write_text("a great film\nboring and awful\n")
    capsys.readouterr()
    main(["predict", "--config", TINY_IMDB, "--ckpt_path", "checkpoints/bert_imdb/last.ckpt", "--data.predict_path",
          "reviews.txt", "--data.tokenizer", str(folder), "--data.max_length", "32"])  # fmt: skip
    assert len(capsys.readouterr().out.strip().splitlines()) == 2  # one prediction a review
    assert not [w for w in recwarn if "batch indices" in str(w.message)]  # Lightning's, of batches it need not know
