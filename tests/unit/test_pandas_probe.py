"""An App does not import pandas (pyarrow's ``pa.array`` would, to ask whether it is
installed: ``codec/pandasprobe.py``), and pyarrow still treats pandas objects as pandas
objects once anything imports pandas. Each case in a fresh process: the probe is once per
process. (pandas comes with the spark extra, which ``make test`` installs.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

START = """
import asyncio, json, sys
import reventless as rv
from tests.model import Counter, Increment

async def main():
    app = rv.App(store="sqlite:///" + sys.argv[1])
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment(by=1))
        await app.settle()
    return "pandas" in sys.modules

imported_by_app = asyncio.run(main())
"""


def run(code: str, tmp_path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "store.db")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_an_app_does_not_import_pandas_and_pyarrow_knows_it_later(tmp_path: Path) -> None:
    got = run(
        START
        + """
import importlib.resources
import pyarrow as pa
import pandas as pd
floats = pa.array(pd.Series([1.0, None, 3.0]))
codes = pa.array(pd.Series(["a", "b", "a"], dtype="category"))
print(json.dumps({
    "imported_by_app": imported_by_app,
    "nulls": floats.null_count,
    "dictionary": pa.types.is_dictionary(codes.type),
    "resources": importlib.resources.files("pandas").joinpath("__init__.py").is_file(),
    "to_pandas": pa.table({"x": [1, 2]}).to_pandas().shape[0],
    "watching": [type(f).__name__ for f in sys.meta_path].count("_Watch"),
}))
""",
        tmp_path,
    )
    assert got == {
        "imported_by_app": False,
        "nulls": 1,  # NaN read as missing: pyarrow saw a pandas Series
        "dictionary": True,
        "resources": True,
        "to_pandas": 2,
        "watching": 0,  # the watch left once pandas was imported
    }


def test_pandas_imported_first_is_left_alone(tmp_path: Path) -> None:
    got = run(
        "import pandas as pd\n"
        + START
        + """
import pyarrow as pa
print(json.dumps({
    "nulls": pa.array(pd.Series([1.0, None])).null_count,
    "watching": [type(f).__name__ for f in sys.meta_path].count("_Watch"),
    "loader": type(pd.__loader__).__name__,
}))
""",
        tmp_path,
    )
    assert got == {"nulls": 1, "watching": 0, "loader": "SourceFileLoader"}
