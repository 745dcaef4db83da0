"""One ``Logger.log(metrics, step)`` writing TensorBoard events and CSV files.

Metric names are ``group/name`` (``train/critic_loss``, ``eval/return``, ``time/sps``);
each group gets its own CSV (``train.csv``, ``eval.csv``...) with a ``step`` column.
Progress lines and notes also go, time-stamped and unthrottled by the console interval
for notes, to ``train.log`` in the run directory. On resume, rows and events after the checkpoint's step are dropped so the files read
like one uninterrupted run.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path


class Logger:
    """TensorBoard + CSV metric sink plus a console progress line."""

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        csv_files: bool = True,
        console: bool = True,
        resume_step: int | None = None,
        progress_interval_s: float = 10.0,
        log_file: str | None = "train.log",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console, self.csv_files = console, csv_files
        # line-buffered append: a killed run keeps every line written before the kill
        self._log_file = (
            (self.run_dir / log_file).open("a", buffering=1) if log_file is not None else None
        )
        self.progress_interval_s = progress_interval_s
        self._last_print = 0.0
        self._writer = None
        self._columns: dict[str, list[str]] = {}
        if resume_step is not None and csv_files:
            for path in self.run_dir.glob("*.csv"):
                _truncate_csv(path, resume_step)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tb"), purge_step=purge)

    def log(self, metrics: dict[str, float | str], step: int) -> None:
        """Record ``metrics`` at ``step`` (environment steps; gradient steps offline).

        A string value (a label such as ``eval/phase``) goes to the CSV cell as written and
        to TensorBoard's text tab; every other value is a float scalar."""
        groups: dict[str, dict[str, float | str]] = {}
        for key, value in metrics.items():
            group = key.split("/", 1)[0] if "/" in key else "train"
            label = isinstance(value, str)
            groups.setdefault(group, {})[key] = value if label else float(value)
            if self._writer is None:
                continue
            if label:
                self._writer.add_text(key, value, step)
            else:
                self._writer.add_scalar(key, float(value), step)
        if self.csv_files:
            for group, values in groups.items():
                self._write_csv(group, values, step)

    def _write_csv(self, group: str, values: dict[str, float | str], step: int) -> None:
        path = self.run_dir / f"{group}.csv"
        columns = self._columns.get(group)
        if columns is None and path.exists():
            with path.open() as f:
                columns = next(csv.reader(f), None)
        keys = sorted(values)
        if columns is None or not set(keys) <= set(columns[1:]):
            columns = ["step", *sorted(set(keys) | set(columns[1:] if columns else []))]
            _rewrite_with_columns(path, columns)
        self._columns[group] = columns
        with path.open("a", newline="") as f:
            row = [step] + [values.get(c, "") for c in columns[1:]]
            csv.writer(f).writerow(row)

    def progress(self, text: str, force: bool = False) -> None:
        """Print (and append to train.log) a progress line at most every
        ``progress_interval_s`` seconds; ``force`` prints it now."""
        now = time.monotonic()
        if force or now - self._last_print >= self.progress_interval_s:
            if self.console:
                print(text, file=sys.stdout, flush=True)
            self.write_log(text)
            self._last_print = now

    def note(self, text: str) -> None:
        """A message the user must see (a fallback, a warning): stderr and train.log."""
        if self.console:
            print(text, file=sys.stderr, flush=True)
        self.write_log(text)

    def write_log(self, text: str) -> None:
        """Append ``text`` to train.log with a time stamp (nothing when disabled)."""
        if self._log_file is not None and not self._log_file.closed:
            self._log_file.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {text}\n")

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
        if self._log_file is not None and not self._log_file.closed:
            self._log_file.flush()

    def video(self, tag: str, path: Path, frames: list, fps: float, step: int) -> None:
        """An evaluation video: its path into train.log, and into TensorBoard an animated
        GIF of ``frames`` (H, W, 3 uint8) under ``tag`` (Images tab; encoded with Pillow,
        as torch's ``add_video`` would with moviepy) plus the MP4's path as text."""
        self.note(f"evaluation video at step {step}: {path}")
        if self._writer is None or not frames:
            return
        import io

        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary

        images = [Image.fromarray(frame) for frame in frames]
        gif = io.BytesIO()
        duration = int(1000 / max(fps, 1.0))
        images[0].save(gif, format="GIF", save_all=True, append_images=images[1:],
                       duration=duration, loop=0)  # fmt: skip
        height, width = frames[0].shape[:2]
        image = Summary.Image(height=height, width=width, colorspace=3,
                              encoded_image_string=gif.getvalue())  # fmt: skip
        # the writer's event file, as SummaryWriter.add_video writes its GIF summary
        self._writer._get_file_writer().add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), step
        )
        self._writer.add_text(f"{tag}_file", str(path), step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._log_file is not None:
            self._log_file.close()


def _read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _rewrite_with_columns(path: Path, columns: list[str]) -> None:
    rows = _read_rows(path)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _truncate_csv(path: Path, last_step: int) -> None:
    rows = _read_rows(path)
    if not rows:
        return
    columns = list(rows[0].keys())
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(r for r in rows if int(float(r["step"])) <= last_step)


def read_csv(path: str | Path) -> list[dict[str, float | str]]:
    """A metrics CSV as a list of {column: value} rows (empty cells dropped); values are
    floats, except label cells (such as ``eval/phase``), which stay strings."""
    return [
        {k: _cell(v) for k, v in row.items() if v not in ("", None)}
        for row in _read_rows(Path(path))
    ]


def _cell(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def format_duration(seconds: float) -> str:
    """``3725`` -> ``1h02m``; ``75`` -> ``1m15s``."""
    seconds = max(0, int(seconds))
    hours, rem = divmod(seconds, 3600)
    minutes, secs = divmod(rem, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
