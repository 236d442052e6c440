"""Hugging Face datasets on disk (`--dataset hf:PATH`): a folder written by
`datasets.Dataset.save_to_disk` (or a DatasetDict's: its "train" split, else the
first), or a .parquet file. Nothing is downloaded.

Rows become conversations by their columns, first match wins:
    conversations   ShareGPT turns ({"from"/"role", "value"/"content"})
    messages        OpenAI chat messages ({"role", "content"})
    prompt | question | instruction | input | text    one user turn; its reply from
                    response | output | answer | completion (sets the output length)

Reading needs the `datasets` package (folders) or `pyarrow` (parquet), optional
extras of this project: without them, one message naming the install.
"""

from __future__ import annotations

from pathlib import Path

from sgl_eagle_ext.common.errors import UserError

PROMPT_COLUMNS = ("prompt", "question", "instruction", "input", "text")
REPLY_COLUMNS = ("response", "output", "answer", "completion")
INSTALL = "pip install datasets (it brings pyarrow), or pip install pyarrow for .parquet"


def _need(module: str, spec: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise UserError(
            f"--dataset {spec}: reading it needs the `{module}` package, which is not "
            f"installed in this Python.",
            fix=INSTALL,
        ) from None


def rows(path_text: str) -> list[dict]:
    """Every row of the dataset at `path_text`, as dicts."""
    spec = f"hf:{path_text}"
    path = Path(path_text).expanduser()
    if path.is_file() and path.suffix.lower() == ".parquet":
        pq = _need("pyarrow.parquet", spec)
        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow's own errors: not a parquet file, truncated
            raise UserError(f"{path}: not a readable parquet file ({e}).", fix=INSTALL) from None
    if not path.is_dir():
        raise UserError(
            f"--dataset {spec}: not a folder written by save_to_disk, nor a .parquet file.",
            fix="give the folder of Dataset.save_to_disk(...) or a .parquet file",
        )
    ds_mod = _need("datasets", spec)
    try:
        ds = ds_mod.load_from_disk(str(path))
    except Exception as e:  # datasets' own errors: not a saved dataset
        raise UserError(
            f"{path}: not a dataset folder written by save_to_disk ({e}).",
            fix="give the folder of Dataset.save_to_disk(...) or a .parquet file",
        ) from None
    if isinstance(ds, ds_mod.DatasetDict):
        ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
    return [dict(r) for r in ds]


def as_sharegpt(row: dict, where: str) -> dict:
    """A row in the ShareGPT shape datasets._conversation reads."""
    if "conversations" in row or "conversation" in row:
        return row
    if isinstance(row.get("messages"), list):
        return {"conversations": row["messages"], **({"id": row["id"]} if "id" in row else {})}
    prompt = next((row[c] for c in PROMPT_COLUMNS if isinstance(row.get(c), str)), None)
    if prompt is None:
        raise UserError(
            f"{where}: no column to take a prompt from (columns: {', '.join(map(str, row))}).",
            fix=f"a dataset with conversations, messages or one of {', '.join(PROMPT_COLUMNS)}",
        )
    reply = next((row[c] for c in REPLY_COLUMNS if isinstance(row.get(c), str)), "")
    turns = [{"from": "human", "value": prompt}]
    if reply:
        turns.append({"from": "gpt", "value": reply})
    return {"conversations": turns, **({"id": row["id"]} if "id" in row else {})}
