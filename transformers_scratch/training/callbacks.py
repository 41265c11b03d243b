"""Callbacks: checkpoints that are never broken, the progress bar, throughput, samples during training, and
the printed predictions. ``SafeModelCheckpoint`` uses ModelCheckpoint's private members (nothing public says that
a save was deferred, which Lightning 2.6 then drops); tests/test_reliability.py pins each."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import Tensor
from tqdm import tqdm

from ..atomic import write_whole, written_whole
from ..bounds import (
    Count,
    NonNegative,
    NonNegativeFloat,
    PathName,
    PositiveFloat,
    SampleLength,
    Time,
    TopK,
    check_args,
    checked,
    not_finite,
    timespan,
)
from ..data.files import refuse_output
from .console import note, shown, silence
from .perf import peak_flops, train_flops_per_token


class TrainingDiverged(RuntimeError):
    """The parameters stopped being finite; the message says which checkpoint was kept."""


class SafeCheckpointIO(CheckpointIO):
    """The strategy's checkpoint writer, refusing weights that are not finite and writing each file whole (a
    temporary file of its own, renamed into place)."""

    def __init__(self, inner: CheckpointIO, callback: SafeModelCheckpoint) -> None:
        self.inner, self.callback = inner, callback
        self.last_written: str | None = None

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if not_finite(checkpoint.get("state_dict", {})):
            raise TrainingDiverged(
                f"the weights became NaN or infinite by step {checkpoint.get('global_step')}; not saving {path}. "
                f"{self.callback.last_good()}"
            )
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(path) as tmp:  # the old file until the new one is complete
            self.inner.save_checkpoint(checkpoint, tmp, storage_options)
        self.last_written = str(path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        """Always as data: a checkpoint may come from anyone, and loading it must never run its code (read first by
        the project's reader, which names what it refuses: torch's warnings about the file are left out here too)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.inner.load_checkpoint(path, map_location=map_location, weights_only=True)

    def remove_checkpoint(self, path) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class Interrupted(SystemExit):
    """A fit stopped by a signal after saving its state; the process exits with 128 + the signal's number."""


class Deadline(Callback):
    """A fit that must be over by a moment on the wall clock (a speedrun's budget, counted from the launch of
    the process by whoever launched it). From ``calibrate_steps`` steps on, after every step, it fits the
    learning-rate schedule to the steps that the time left allows at the recent pace (the median of the last
    ``calibrate_steps`` steps, so one slow step, a pause of the machine, moves it little), so that the decay ends
    when the budget does. It stops training only on the clock: when one more step and the closing save
    (``reserve_s``) would pass the deadline. A schedule fitted to a pace that was too slow is stretched again at
    the next step, never a reason to stop early.

    Args:
        at: ``time.time()`` by which fit must have ended; None: the environment's ``TS_DEADLINE``.
        reserve_s: Seconds kept for writing the last checkpoint and exiting.
        calibrate_steps: Steps timed before the schedule is first fitted (the first ones, compile and warm-up,
            are left out of the pace), and the window of the pace.
    """

    def __init__(self, at: PositiveFloat | None = None, reserve_s: NonNegativeFloat = 3.0,
                 calibrate_steps: Count = 30) -> None:  # fmt: skip
        check_args(Deadline.__init__, locals(), "Deadline")
        if at is None:  # read now: a refusal comes before the run has claimed its folders
            if not os.environ.get("TS_DEADLINE"):
                raise ValueError("Deadline needs a moment: its `at` setting, or TS_DEADLINE in the environment")
            at = checked(PositiveFloat, os.environ["TS_DEADLINE"], "TS_DEADLINE")
        self.at, self.reserve_s, self.calibrate_steps = at, reserve_s, calibrate_steps
        self.stamps: list[float] = []
        self.fitted_steps: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.stamps = [time.time()]

    def step_seconds(self) -> float:
        """Seconds a step at the recent pace: the median over the last ``calibrate_steps`` steps, or over the
        later half of them before there are more (warm-up left out)."""
        n = len(self.stamps) - 1
        recent = self.stamps[-self.calibrate_steps - 1 :] if n > self.calibrate_steps else self.stamps[n // 2 :]
        if len(recent) < 2:
            return 0.0
        return statistics.median([b - a for a, b in zip(recent, recent[1:], strict=False)])

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        now, at = time.time(), self.at
        assert at is not None  # set when training started
        self.stamps.append(now)
        step_s = self.step_seconds()
        if len(self.stamps) - 1 >= self.calibrate_steps:
            left = int((at - self.reserve_s - now) / step_s) if step_s > 0 else 0
            self.fitted_steps = min(trainer.max_steps, trainer.global_step + max(left, 0))
            self.fit_schedule(trainer, pl_module, self.fitted_steps)
        if now + step_s + self.reserve_s >= at:
            trainer.should_stop = True

    @staticmethod
    def fit_schedule(trainer, pl_module, total: int) -> None:
        """The schedule's length set to ``total`` steps (its lambda is rebuilt over the same settings)."""
        from .optim import lr_factor

        for config in trainer.lr_scheduler_configs:
            config.scheduler.lr_lambdas = [
                lambda step, n=total: lr_factor(step, pl_module.optim, n) for _ in config.scheduler.lr_lambdas
            ]


class StopOnSignal(Callback):
    """Ctrl-C or SIGTERM stops a fit at the end of the step (or validation) under way, writes ``last.ckpt``
    and exits 130 or 143; ``--ckpt_path last`` then ends as the uninterrupted run does. A second Ctrl-C stops at
    once. validate, test, predict and a fit's sanity check stop at the end of the batch under way, with one line and
    the same status. Replaces Lightning's SIGTERM handling, a ``SystemExit(0)`` that a scheduler reads as success."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None  # the signal that asked for a stop
        self.previous: dict[int, Any] = {}  # the handlers this one replaced
        self.outer: dict[int, Any] = {}  # those before Lightning's (restore)
        self.training = False  # a fit's steps have begun: a stop saves them
        self.at_once = False  # a second Ctrl-C stopped the run mid-step: nothing is saved

    def listen(self, *args: Any, **kwargs: Any) -> None:
        """The handlers, put in place once a run, after Lightning's (which it puts in place as the loops begin)."""
        if not self.previous:
            self.signal, self.at_once = None, False
            for number in (signal.SIGINT, signal.SIGTERM):
                self.previous[number] = signal.signal(number, self.request_stop)

    on_sanity_check_start = on_validation_start = on_test_start = on_predict_start = listen

    def setup(self, *args: Any, **kwargs: Any) -> None:  # the hook before Lightning puts its handlers in place
        self.outer = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        silence()  # the CLI's warning filters, which a process that ddp_spawn starts does not inherit

    def on_train_start(self, trainer, pl_module) -> None:
        self.listen()
        self.training = True

    def request_stop(self, number, frame) -> None:
        if self.signal == signal.SIGINT and number == signal.SIGINT:  # a second Ctrl-C: now, mid-step
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.at_once = True
            raise Interrupted(128 + number)  # not a KeyboardInterrupt, which Lightning ends with status 1, silently
        self.signal = asked = signal.Signals(number)
        until = "step, to save it" if self.training else "batch"
        note(f"\n{asked.name}: stopping at the end of this {until} (Ctrl-C again: stop at once)")

    def stop_if_asked(self, trainer, *args: Any, **kwargs: Any) -> None:
        """A stop where a signal asked for one; under several processes, of every rank at the same batch, whichever
        the signal reached (``kill`` of the launching process reaches rank 0 alone, and a rank that stopped alone
        left the others waiting on it for ever). One small collective a batch, as Lightning's own check of SIGTERM."""
        asked = self.signal.value if self.signal is not None else 0
        if trainer.world_size > 1:
            device = trainer.strategy.root_device
            asked = int(trainer.strategy.reduce(torch.tensor(asked, device=device), reduce_op="max"))
        if asked:
            self.signal = signal.Signals(asked)
            raise Interrupted(128 + asked)

    on_train_batch_end = on_test_batch_end = on_predict_batch_end = stop_if_asked

    def on_validation_batch_end(self, trainer, *args) -> None:
        if not self.training:  # a fit's validations run whole (on_validation_end), so that its resume is exact
            self.stop_if_asked(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.stop_if_asked(trainer)
        if trainer.state.fn == "validate":
            self.restore()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        name = self.signal.name if self.signal is not None else "a signal"
        command = getattr(trainer.state.fn, "value", "the command")
        if isinstance(exception, Interrupted) and self.at_once:
            unsaved = ", mid-step: nothing was saved since the last checkpoint" if self.training else ""
            note(f"{name} again: {command} stopped at once{unsaved}")
        elif isinstance(exception, Interrupted) and self.training and (ours := run_checkpoint(trainer)) is not None:
            note(f"{name} at step {trainer.global_step}: saved {shown(ours.save_now(trainer))}; continue with "
                 "--ckpt_path last")  # fmt: skip
        elif isinstance(exception, Interrupted):
            said = {"fit": " before training: nothing was saved", "predict": "; the predictions made until "
                    "then are written"}.get(command, "; it reported no score")  # fmt: skip
            note(f"{name}: {command} stopped{said}")
        self.restore()

    def on_train_end(self, *args: Any, **kwargs: Any) -> None:
        self.restore()

    on_test_end = on_predict_end = on_train_end

    def restore(self) -> None:
        """The handlers from before the run, not Lightning's, which an error in a spawned process leaves in place."""
        for number, handler in self.previous.items():
            signal.signal(number, handler if self.outer.get(number) is None else self.outer[number])
        self.previous, self.training = {}, False


class SafeModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` writing through :class:`SafeCheckpointIO` (training stops on non-finite weights,
    naming the last good checkpoint). ``monitor: null``: the module's own metric (``val/bpc``, ``val/acc``)."""

    def __init__(self, *, dirpath: PathName | None = None, save_top_k: TopK = 1, mode: Literal["min", "max"] = "min",
                 every_n_train_steps: NonNegative | None = None, every_n_epochs: NonNegative | None = None,
                 save_last: Literal[True, "link"] = True, save_weights_only: Literal[False] = False,
                 train_time_interval: Time | None = None, **kwargs) -> None:  # fmt: skip
        """
        Args:
            train_time_interval: Save each time this much training time has passed, as trainer.max_time is
                given: DD:HH:MM:SS, or a mapping ({minutes: 30}).
            save_last: Never false: every run keeps checkpoints/NAME/last.ckpt, the file it resumes, samples and
                exports from (link: a link to the newest checkpoint, on a local filesystem).
            save_weights_only: Never true: last.ckpt keeps the optimizer's and the loops' state that a resume needs.
        """
        check_args(SafeModelCheckpoint.__init__, locals(), "checkpoint")
        when = {"every_n_train_steps": every_n_train_steps, "every_n_epochs": every_n_epochs,
                "train_time_interval": train_time_interval is not None}  # fmt: skip
        if len(given := [f"checkpoint.{k}" for k, v in when.items() if v]) > 1:
            raise ValueError(f"{' and '.join(given)} each say when to save, and exclude each other; pass one of them")
        try:
            super().__init__(dirpath=dirpath, save_top_k=save_top_k, mode=mode, every_n_train_steps=every_n_train_steps,
                             every_n_epochs=every_n_epochs, save_last=save_last,
                             train_time_interval=timespan(train_time_interval), **kwargs)  # fmt: skip
        except MisconfigurationException as e:  # settings that exclude each other: named as the checkpoint key's
            raise ValueError(f"checkpoint: {e}") from None
        self.check_filename()

    def check_filename(self) -> None:
        """The file name pattern, before any training: Lightning formats it at each save, so a malformed one
        failed at the first save, and a name outside the run's folder, or last.ckpt's, was written there."""
        if self.filename is None:
            return
        try:
            name = self.format_checkpoint_name({})  # every metric it names as 0, in the folder
        except (ValueError, KeyError, IndexError) as e:
            raise ValueError(f"checkpoint.filename {self.filename!r} is no file name pattern ({e}); pass one such "
                             "as 'step{step}-bpc{val/bpc:.4f}'") from None  # fmt: skip
        inside = os.path.relpath(name, self.dirpath or ".")  # a folder not yet set: the trainer's, later
        if inside.split(os.sep)[0] == ".." or Path(inside).stem == self.CHECKPOINT_NAME_LAST:
            raise ValueError(f"checkpoint.filename {self.filename!r} names a file outside the run's folder, or its "
                             "last.ckpt; pass a name inside it, such as 'step{step}-bpc{val/bpc:.4f}' "
                             "(--checkpoint.dirpath moves the folder)")  # fmt: skip
        if (longest := max(len(part.encode()) for part in Path(inside).parts)) > 255:  # refused at the first save
            raise ValueError(f"checkpoint.filename {self.filename!r} makes a file name of {longest:,} bytes, more than "
                             "the 255 a file system takes; pass a shorter one")  # fmt: skip

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """A fit that fails after training steps keeps them in ``last.ckpt`` (one process only: a save waits
        for every rank); a divergence or a second Ctrl-C saves nothing."""
        start = getattr(self, "trained_from", None)  # None before training: a restore failed midway saved its half
        if isinstance(exception, Interrupted | TrainingDiverged | KeyboardInterrupt) or start is None:
            return
        if trainer.state.fn == "fit" and trainer.world_size == 1 and not trainer.fast_dev_run and trainer.global_step \
                > start:  # fmt: skip
            note(f"{type(exception).__name__} at step {trainer.global_step}: saved {shown(self.save_now(trainer))}")

    def save_now(self, trainer) -> Path:
        """``last.ckpt`` written now, whole, where a stopped or failed fit leaves its state (through
        :class:`SafeCheckpointIO`, like every save)."""
        path = Path(self.dirpath or "checkpoints") / "last.ckpt"
        trainer.save_checkpoint(path)
        return path

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, SafeCheckpointIO):
            trainer.strategy.checkpoint_io = SafeCheckpointIO(io, self)
        self.io = trainer.strategy.checkpoint_io
        self.first_bad: Tensor | None = None  # on the device: the first step whose loss was not finite, or -1
        self.trained_from: int | None = None  # the step training started from, once it has (a resume restored)

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self.trained_from = trainer.global_step

    def load_state_dict(self, state_dict: dict) -> None:
        """Lightning's record of the checkpoints written, each path resolved: a resumed run deletes the worst of
        them, and a hostile ``FOLDER/../../file`` must not pass as inside its folder."""
        super().load_state_dict(state_dict)
        real = lambda path: os.path.realpath(path) if path and "://" not in str(path) else path  # noqa: E731
        self.best_k_models = {real(path): score for path, score in self.best_k_models.items()}
        self.kth_best_model_path, self.best_model_path = real(self.kth_best_model_path), real(self.best_model_path)
        self.last_model_path = real(self.last_model_path)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """The run's log versions (CSV version, W&B run id), so that a resumed run continues them."""
        checkpoint["run"] = {type(lg).__name__: lg.version for lg in trainer.loggers if lg.version is not None}

    # ---- divergence: caught at the step it happens, read on logging steps only ----
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if torch.is_tensor(loss):  # a device-side record, so checking costs no sync
            if self.first_bad is None:
                self.first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
            bad = ~torch.isfinite(loss.detach()) & (self.first_bad < 0)
            self.first_bad = torch.where(bad, trainer.global_step, self.first_bad)
            if trainer.global_step % trainer.log_every_n_steps == 0:
                self.stop_if_diverged(trainer)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._save_last_on_schedule(trainer)

    # ---- every checkpoint asked for is written (Lightning 2.6 drops some; tests/test_reliability.py pins these) ----
    def _save_last_on_schedule(self, trainer) -> None:
        """``every_n_train_steps`` before the first validation: Lightning defers the save until the metric
        exists, then drops it; ``last.ckpt`` needs no metric, so it is written now."""
        every = getattr(self, "_every_n_train_steps", 0)
        if not (getattr(self, "_defer_save_until_validation", False) and self.save_last and every):
            return
        if trainer.global_step % every == 0 and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """A save deferred to "after validation" happens at the epoch's end, where this run saves, with the
        validation's fresh metric."""
        super().on_train_epoch_end(trainer, pl_module)
        if not getattr(self, "_defer_save_until_validation", False) or not self._should_save_on_train_epoch_end(
            trainer
        ):
            return
        candidates = self._monitor_candidates(trainer)
        if self.monitor in candidates and trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
            self._defer_save_until_validation = False

    def _save_topk_checkpoint(self, trainer, monitor_candidates: dict) -> None:
        """Lightning's, where a monitored metric that the run does not log (known once a validation has run) is
        named as ``checkpoint.monitor`` (metrics outside ``val/`` are not known before)."""
        try:
            super()._save_topk_checkpoint(trainer, monitor_candidates)
        except MisconfigurationException:
            if self.monitor in monitor_candidates:
                raise
            raise ValueError(f"checkpoint.monitor {self.monitor!r} is no metric this run logs (it logs "
                             f"{', '.join(monitor_candidates)}); pass one of those") from None  # fmt: skip

    def on_train_end(self, trainer, pl_module) -> None:
        """``last.ckpt`` is the model training ended with; a ``fast_dev_run`` writes none."""
        if trainer.fast_dev_run:
            return
        super().on_train_end(trainer, pl_module)
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:  # nothing downstream (metrics, samples) runs on a diverged model
            self.stop_if_diverged(trainer)

    def stop_if_diverged(self, trainer) -> None:
        step = -1 if self.first_bad is None else int(self.first_bad)
        if step >= 0:
            raise TrainingDiverged(
                f"the training loss became NaN or infinite at step {step} (checked at step {trainer.global_step}); "
                f"training stopped. {self.last_good()}"
            )

    def last_good(self) -> str:
        """Where to resume from after a divergence: the newest checkpoint this run (or the run it resumed)
        wrote; every checkpoint written is finite."""
        written = getattr(getattr(self, "io", None), "last_written", None)
        candidates = [written, self.last_model_path, self.best_model_path]
        if self.dirpath and Path(self.dirpath).is_dir():
            newest = sorted(Path(self.dirpath).glob("*.ckpt"), key=os.path.getmtime, reverse=True)
            candidates += [str(p) for p in newest]
        kept = next((c for c in candidates if c and Path(c).is_file()), None)
        return (
            f"Last good checkpoint: {kept or 'none was saved yet'}. Lower the learning rate, lengthen the warm-up "
            "or keep gradient clipping on, then resume" + (f" with --ckpt_path {kept}" if kept else "")
        )


def run_checkpoint(trainer) -> SafeModelCheckpoint | None:
    """The run's own checkpoint callback (checkpoints/NAME/last.ckpt), whatever other ModelCheckpoints a config
    adds beside it; None for a trainer built without it."""
    return next((c for c in trainer.checkpoint_callbacks if isinstance(c, SafeModelCheckpoint)), None)


def duration(seconds: float) -> str:
    """3 h 05 min, 4 min 10 s, 12 s: a duration as a person reads it."""
    seconds = round(seconds)
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _on_stderr(init):
    """A bar of Lightning's made on stderr: its bars write to ``sys.stdout``, read when they are made."""

    def wrapped(self):
        with contextlib.redirect_stdout(sys.stderr):
            return init(self)

    return wrapped


class ProgressBar(TQDMProgressBar):
    """Lightning's bar, on stderr, with one training bar over the whole run (steps out of ``max_steps``, the
    rate counted from where this process started) showing the host copies of ``LitTransformer.log_train``."""

    init_sanity_tqdm = _on_stderr(TQDMProgressBar.init_sanity_tqdm)
    init_validation_tqdm = _on_stderr(TQDMProgressBar.init_validation_tqdm)
    init_test_tqdm = _on_stderr(TQDMProgressBar.init_test_tqdm)
    init_predict_tqdm = _on_stderr(TQDMProgressBar.init_predict_tqdm)

    def init_train_tqdm(self):
        """Optimizer steps of the whole run; ``initial``: the steps a resumed run had done, so that the rate
        and the time left count this process's steps only."""
        step, total = self.trainer.global_step, self.trainer.max_steps
        return Tqdm(desc="steps", total=total if total > 0 else None, initial=step, position=2 * self.process_position,
                    disable=self.is_disabled, leave=True, dynamic_ncols=True, file=sys.stderr, smoothing=0,
                    bar_format=self.BAR_FORMAT)  # fmt: skip

    def on_sanity_check_end(self, *_) -> None:
        super().on_sanity_check_end()
        if not self.is_disabled and not sys.stderr.isatty():  # its bars end in a carriage return: end the line
            print(file=sys.stderr)

    def on_train_start(self, trainer, *_) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer, *_) -> None:
        pass  # one bar for the run: an epoch does not restart it

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is not None and self._should_update(trainer.global_step, bar.total) and trainer.global_step > bar.n:
            bar.update(trainer.global_step - bar.n)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer, pl_module) -> dict:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        items.update({k: f"{v:.4g}" for k, v in getattr(pl_module, "shown", {}).items()})
        return items


class Throughput(Callback):
    """``train/tokens_per_s`` over all devices and, on a GPU, ``train/mfu`` and ``train/peak_mem_gb``, on the
    logging steps. Host-side counters only (no device sync); each figure covers the steps completed since the last."""

    ESTIMATE_AFTER = (3, 23)  # the estimate of the run's time times these steps (the first few warm up)

    def on_train_start(self, trainer, pl_module) -> None:
        self.tokens, self.flops, self.clock = 0, 0.0, time.perf_counter()
        self.peak = peak_flops(pl_module.device, trainer.precision)
        if self.peak is None and pl_module.device.type == "cuda":
            gpu, precision = torch.cuda.get_device_name(pl_module.device), trainer.precision
            note(f"note: no train/mfu: Lightning keeps no peak FLOPs for {gpu} at trainer.precision {precision}")
        self.marks: dict[int, float] = {}  # step -> the time it started, for the estimate
        self.first_step, self.said = trainer.global_step, False

    def estimate(self, trainer) -> None:
        """Once, early: how long the whole run takes at the speed of its first steps."""
        done = trainer.global_step - self.first_step
        if done in self.ESTIMATE_AFTER and done not in self.marks:
            self.marks[done] = time.perf_counter()
        if len(self.marks) == 2 and trainer.max_steps > 0 and not self.said:
            self.said = True
            a, b = self.ESTIMATE_AFTER
            step = (self.marks[b] - self.marks[a]) / (b - a)
            left = step * (trainer.max_steps - trainer.global_step)
            tqdm.write(f"estimate: {trainer.max_steps:,} steps at {step:.3g} s a step; about {duration(left)} to go "
                       "(validation, samples and checkpoints add to it)", file=sys.stderr)  # fmt: skip

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.is_global_zero:
            self.estimate(trainer)
        if pl_module.should_log() and self.tokens:
            now = time.perf_counter()
            seconds = now - self.clock
            pl_module.log_train(tokens_per_s=self.tokens * trainer.world_size / seconds)
            if self.peak:
                pl_module.log_train(mfu=self.flops / seconds / self.peak)
            if pl_module.device.type == "cuda":  # the allocator's count: no wait for the device
                pl_module.log_train(peak_mem_gb=torch.cuda.max_memory_allocated(pl_module.device) / 2**30)
            self.tokens, self.flops, self.clock = 0, 0.0, now
        ids = pl_module.batch_ids(batch)  # (b, t)
        self.tokens += ids.numel()
        self.flops += ids.numel() * train_flops_per_token(pl_module.model.cfg, ids.size(1), pl_module.output_size)


class SampleText(Callback):
    """After each validation, a random validation slice continued by the model and printed (and logged to W&B),
    for models that generate fed by a data module with ``seed_text`` and ``vocab``."""

    def __init__(
        self, length: SampleLength = 600, temperature: NonNegativeFloat = 0.5, seed_length: Count = 256
    ) -> None:
        """
        Args:
            length: Characters sampled after each validation (0: never).
            temperature: Sampling temperature (the tutorial's 0.5; 0 is greedy).
            seed_length: Length of the validation slice the sample continues (at most the model's context).
        """
        check_args(SampleText.__init__, locals(), "sample")
        self.length, self.temperature, self.seed_length = length, temperature, seed_length
        self.noted_fsdp = False
        self.seconds = 0.0  # spent sampling in this process (PhaseTimes reports it)
        self.sampled_at: int | None = None  # the step of the last sample: one sample per step

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        model: Any = getattr(pl_module, "model", None)
        data = trainer.datamodule
        if self.length == 0 or trainer.sanity_checking or not hasattr(model, "generate"):
            return
        if not (hasattr(data, "seed_text") and hasattr(data, "vocab")):
            return
        if isinstance(trainer.strategy, FSDPStrategy):  # one rank cannot run sharded blocks alone
            if not self.noted_fsdp:
                self.noted_fsdp = True
                note("note: no samples during FSDP training; use `cli.py sample --ckpt_path ...`")
            return
        if not trainer.is_global_zero:
            return
        if self.sampled_at == trainer.global_step:  # the full validation after fit: this step has its sample
            return
        # A generator of its own: sampling leaves the global stream (dropout) as it was, so training's numbers
        # do not depend on whether or how much it samples, and a resumed run continues them exactly.
        start, self.sampled_at = time.perf_counter(), trainer.global_step
        generator = torch.Generator(pl_module.device).manual_seed(trainer.global_step)
        seed = data.seed_text(
            min(self.seed_length, model.cfg.context), torch.Generator().manual_seed(trainer.global_step)
        )
        try:
            out = model.generate(seed.to(pl_module.device), self.length, temperature=self.temperature,
                                 generator=generator)  # fmt: skip
        except FloatingPointError:  # NaN weights, or finite ones so large that the scores overflow
            note(f"note: no sample at step {trainer.global_step}: the model's scores are not finite")
            return
        prompt, text = data.vocab.decode(seed[0]), data.vocab.decode(out[0, seed.size(1) :])
        print(f"--- sample at step {trainer.global_step} (temperature {self.temperature}) ---\n[{prompt}]{text}\n---",
              flush=True)  # stdout: a run's output  # fmt: skip
        for logger in trainer.loggers:
            if hasattr(logger, "log_text"):  # W&B: a table of samples over training
                row = [trainer.global_step, prompt, text]
                logger.log_text("samples", columns=["step", "seed", "sample"], data=[row])
        self.seconds += time.perf_counter() - start


class PhaseTimes(Callback):
    """Where a run's wall time goes, in ``phases.json`` beside the CSV log: the first batch's ``time.time()``
    (start-up ends there), and seconds in training, validation and samples."""

    def __init__(self) -> None:
        # moments (time.time(), None until they happen) and durations (seconds)
        self.times: dict[str, Any] = {"fit_start": None, "first_batch": None, "train_s": 0.0, "val_s": 0.0,
                                      "sample_s": 0.0}  # fmt: skip
        self._train_start: float | None = None
        self._val_start = 0.0
        self._val_in_train = 0.0

    def on_fit_start(self, trainer, pl_module) -> None:
        self.times["fit_start"] = time.time()

    def _first(self) -> None:
        if self.times["first_batch"] is None:
            self.times["first_batch"] = time.time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._first()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._first()

    def on_train_start(self, trainer, pl_module) -> None:
        self._train_start, self._val_in_train = time.perf_counter(), 0.0

    def on_train_end(self, trainer, pl_module) -> None:
        if self._train_start is not None:
            self.times["train_s"] += time.perf_counter() - self._train_start - self._val_in_train
            self._train_start = None

    def on_validation_start(self, trainer, pl_module) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        seconds = time.perf_counter() - self._val_start
        self.times["val_s"] += seconds
        if self._train_start is not None:
            self._val_in_train += seconds

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.times["sample_s"] = sum(getattr(c, "seconds", 0.0) for c in trainer.callbacks if isinstance(c, SampleText))
        log_dir = trainer.log_dir if trainer.loggers else None  # no logger: no run folder to write to
        # (every process asks: under DDP trainer.log_dir is a broadcast, which one process alone would hang on)
        if trainer.is_global_zero and log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            write_whole(Path(log_dir) / "phases.json", json.dumps(self.times, indent=1) + "\n")


class PredictionWriter(BasePredictionWriter):
    """What ``predict`` computed, to stdout or a file: a classifier's ``label<TAB>probability<TAB>text`` for
    each input in order; a character model's bits per byte of the file."""

    def __init__(self, output: PathName | None = None) -> None:
        """
        Args:
            output: A file to write the predictions to; None: standard output.
        """
        super().__init__(write_interval="batch_and_epoch")
        if output is not None:  # refused before the predictions are computed
            refuse_output(output, "--predictions.output", "predictions.txt")
        self.output = output
        self.lines: list[str] = []
        self.bits = self.count = 0.0

    def on_predict_start(self, trainer, pl_module) -> None:
        inputs = (
            ("data.predict_path", getattr(trainer.datamodule, "predict_path", None)),
            ("--ckpt_path", trainer.ckpt_path),
        )
        if self.output:
            refuse_output(self.output, "--predictions.output", "predictions.txt", inputs)

    def on_predict_epoch_start(self, trainer, pl_module) -> None:
        self.lines, self.bits, self.count = [], 0.0, 0.0

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        if prediction.dim() == 1:  # (bits, bytes scored) of a window batch
            bits, count = prediction.tolist()
            self.bits, self.count = self.bits + bits, self.count + count
            return
        names = getattr(trainer.datamodule, "class_names", None) or [str(c) for c in range(prediction.size(1))]
        texts = batch[3] if len(batch) > 3 else [""] * len(prediction)
        for p, text in zip(prediction.tolist(), texts, strict=True):
            best = max(range(len(p)), key=p.__getitem__)
            self.lines.append(f"{names[best]}\t{p[best]:.4f}\t{text[:70]}")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, Interrupted):  # stopped by a signal: what it computed is written, not lost
            self.write_on_epoch_end(trainer, pl_module, [], [])

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        if self.count:
            path = getattr(trainer.datamodule, "predict_path", None) or "the file"
            unit = getattr(trainer.datamodule, "unit", "byte")  # or a tokenizer's token
            self.lines.append(f"{path}: {self.bits / self.count:.4f} bits per {unit} over {int(self.count):,} {unit}s")
        if not trainer.is_global_zero or not self.lines:
            return
        text = "\n".join(self.lines) + "\n"
        if self.output is None:
            sys.stdout.write("\n" + text)
            sys.stdout.flush()
        else:
            Path(self.output).parent.mkdir(parents=True, exist_ok=True)
            replaced = Path(self.output).is_file()  # not a pipe or a device, written to in place
            write_whole(Path(self.output), text)
            note(f"predictions written to {self.output}" + (" (it replaced the file of that name)" if replaced else ""))


# The callbacks every run has whose settings are groups of flags: --checkpoint.*, --sample.*, --predictions.*
CALLBACK_GROUPS: dict[str, type] = {"checkpoint": SafeModelCheckpoint, "sample": SampleText,
                                    "predictions": PredictionWriter}  # fmt: skip
