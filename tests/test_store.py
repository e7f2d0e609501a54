"""bakeoff.store: what an older bakeoff left in a sweep directory still reads."""

from __future__ import annotations

import sqlite3

from bakeoff.store import Store


def test_a_plain_text_meta_value_from_an_older_bakeoff_still_reads(tmp_path):
    """Seen on the grid stores of bench/search_efficiency.py written earlier the same day: the
    identity stood in `meta` as bare text (889cc68d6081), and reading the sweep raised
    JSONDecodeError. A value that is not JSON reads as the text it is."""
    with Store(tmp_path) as store:
        store.init_sweep("s", {"name": "s"}, {}, "889cc68d6081")
        store.set_meta("note", {"a": 1})
    db = sqlite3.connect(tmp_path / "bakeoff.sqlite")
    db.execute("UPDATE meta SET value='889cc68d6081' WHERE key='identity'")
    db.commit()
    db.close()
    with Store(tmp_path) as store:
        assert store.meta("identity") == "889cc68d6081"
        assert store.meta("note") == {"a": 1}
        assert store.current() == []
