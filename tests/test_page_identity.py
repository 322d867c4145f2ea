"""Products a page lists without any id or colour (a real page's accessories, recommendations) are told apart by
their titles, not folded into one row that mixes their pictures; the same item seen twice is still one row, and
the crawl's counts reconcile (product items = products + items merged into another's row)."""

from pathlib import Path

import pyarrow.parquet as pq

from lookbench_pipeline.crawl import CrawlOutput, merge_catalog
from lookbench_pipeline.extract import product_key

T = "2026-07-06T10:00:00+00:00"
PAGE = "http://127.0.0.1:8123/pages/obrazy.html"


def _item(pos, title, image, url=PAGE, **kw):
    return {"kind": "product", "url": url, "crawled_at": T, "page_position": pos, "title": title,
            "image_urls": [image], "site": "shop", **kw}


def _crawl(tmp_path: Path, items) -> tuple[list[dict], dict]:
    feed = tmp_path / "crawl" / "items.jsonl"
    feed.parent.mkdir(parents=True, exist_ok=True)
    out = CrawlOutput(site="shop", feed=feed, log_file=feed.with_name("scrapy.log"), base_url="http://127.0.0.1:8123",
                      items=items)
    cat = merge_catalog(out, tmp_path / "state")
    rows = pq.read_table(tmp_path / "state" / "shop" / "products.parquet").to_pylist()
    return rows, cat.counts


def test_two_products_of_one_page_without_ids_are_two_rows_each_with_its_own_pictures(tmp_path):
    rows, counts = _crawl(tmp_path, [
        _item(0, "Rzepy do obrazów", "https://c.test/rzepy.jpg"),
        _item(1, "Klej montażowy", "https://c.test/klej.jpg"),
        _item(2, "Klej  montażowy", "https://c.test/klej-2.jpg"),  # the same accessory again: its row
        _item(3, "Rzepy do obrazów", "https://c.test/rzepy-b.jpg"),  # the page's product shown again
    ])
    by_title = {r["title"]: r for r in rows}
    assert len(rows) == 2 and set(by_title) == {"Rzepy do obrazów", "Klej montażowy"}
    assert by_title["Rzepy do obrazów"]["image_urls"] == ["https://c.test/rzepy.jpg", "https://c.test/rzepy-b.jpg"]
    assert by_title["Klej montażowy"]["image_urls"] == ["https://c.test/klej.jpg", "https://c.test/klej-2.jpg"]
    # the page's first product keeps the id it always had; the other takes one by its title
    assert by_title["Rzepy do obrazów"]["product_id"] == product_key("shop", PAGE, None)
    assert by_title["Klej montażowy"]["product_id"] == product_key("shop", PAGE, None, title="Klej montażowy")
    assert counts["product_items"] == 4 == counts["products"] + counts["product_items_merged"]
    assert counts["products_told_apart_by_title"] == 1

    # the ids hold from one crawl to the next: the second crawl finds both as they were
    again, counts = _crawl(tmp_path, [_item(0, "Rzepy do obrazów", "https://c.test/rzepy.jpg"),
                                      _item(1, "Klej montażowy", "https://c.test/klej.jpg")])
    assert {r["product_id"] for r in again} == {r["product_id"] for r in rows} and counts["products_new"] == 0
    # listed in the other order, each keeps its id (and its first_seen_at): the stored row says who owns the key
    swapped, counts = _crawl(tmp_path, [_item(0, "Klej montażowy", "https://c.test/klej.jpg"),
                                        _item(1, "Rzepy do obrazów", "https://c.test/rzepy.jpg")])
    assert {r["title"]: r["product_id"] for r in swapped} == {t: r["product_id"] for t, r in by_title.items()}
    assert counts["products_new"] == 0 and counts["products_disappeared"] == 0


def test_an_item_without_a_title_is_not_told_apart(tmp_path):
    """Nothing tells an item with no title from the page's product: it is the same row (counted merged)."""
    rows, counts = _crawl(tmp_path, [_item(0, "Rzepy do obrazów", "https://c.test/rzepy.jpg"),
                                     _item(1, None, "https://c.test/x.jpg"), _item(2, "  ", "https://c.test/y.jpg")])
    assert len(rows) == 1 and counts["products_told_apart_by_title"] == 0 and counts["product_items_merged"] == 2


def test_items_with_ids_or_colours_and_one_item_on_two_pages_are_unchanged(tmp_path):
    rows, counts = _crawl(tmp_path, [
        _item(0, "Top", "https://c.test/a.jpg", variant_id="T-1"),
        _item(1, "Other top", "https://c.test/b.jpg", variant_id="T-1"),  # one id: one item, whatever its title
        _item(2, "Dress", "https://c.test/red.jpg", color="Red"),
        _item(3, "Dress", "https://c.test/blue.jpg", color="Blue"),
        _item(0, "Top", "https://c.test/c.jpg", url="http://127.0.0.1:8123/pages/other.html", variant_id="T-1"),
    ])
    assert len(rows) == 3 and counts["products_told_apart_by_title"] == 0
    [top] = [r for r in rows if r["variant_id"] == "T-1"]
    assert top["product_id"] == product_key("shop", PAGE, "T-1")
    assert top["image_urls"] == ["https://c.test/a.jpg", "https://c.test/b.jpg", "https://c.test/c.jpg"]
    assert counts["product_items"] == 5 == counts["products"] + counts["product_items_merged"]


def test_a_look_link_naming_the_reference_the_colours_share_resolves_to_the_pages_product():
    """A page's colours share the sku the page prints (its product's reference): a link that names it stands for the
    page's own product, and a link naming a colour's variant_id for that colour."""
    from lookbench_pipeline.crawl import PageProduct, resolve_look_link
    from lookbench_pipeline.extract import path_key

    page = [PageProduct("p611", "84994776-611", "7901/312"), PageProduct("p800", "84994776-800", "7901/312")]
    on_page = {path_key("shop", PAGE): page}
    # the page was crawled without the query: the shared reference names the page's product, an id its colour
    assert resolve_look_link("shop", PAGE + "?ref=7901/312", on_page) == ("p611", "named_in_link")
    assert resolve_look_link("shop", PAGE + "?v=84994776-800", on_page) == ("p800", "named_in_link")


def _state_crawl(tmp_path, when, titles, reused=False, extra_pages=()):
    """merge_catalog of a one-site crawl of product pages ``titles`` at ``when`` (and ``extra_pages``, page rows);
    (counts, state rows by title)."""
    feed = tmp_path / when / "items.jsonl"
    feed.parent.mkdir(parents=True, exist_ok=True)
    items = [{**_item(0, t, f"https://c.test/{t}.jpg", url=f"http://127.0.0.1:8123/p/{t}.html"),
              "crawled_at": when} for t in titles]
    items += [{"kind": "page", "site": "shop", "url": f"http://127.0.0.1:8123/p/{t}.html", "status": 200,
               "outcome": "product", "reason": None, "crawled_at": when} for t in titles]
    out = CrawlOutput(site="shop", feed=feed, log_file=feed.with_name("scrapy.log"),
                      base_url="http://127.0.0.1:8123", items=[*items, *extra_pages], reused=reused)
    c = merge_catalog(out, tmp_path / "state").counts
    state = pq.read_table(next((tmp_path / "state").rglob("products.parquet"))).to_pylist()
    return ((c["products"], c["products_new"], c["products_disappeared"]),
            {r["title"]: (r["first_seen_at"], r["last_seen_at"], r["disappeared_at"]) for r in state})


def test_an_older_week_read_back_after_a_later_one_does_not_turn_the_state_back(tmp_path):
    """Week 1 saw a and b, week 2 b and c. Materialising week 1 again (its finished crawl read back) leaves the state
    as week 2 left it: c is not gone (week 2 saw it after), a stays gone since week 2, b's last sighting stays week
    2; week 3 then finds nothing newly gone (before, it counted a's disappearance a second time)."""
    from datetime import datetime

    w1, w2, w3 = (f"2026-07-{d:02d}T10:00:00+00:00" for d in (6, 13, 20))
    t1, t2 = datetime.fromisoformat(w1), datetime.fromisoformat(w2)
    assert _state_crawl(tmp_path, w1, ["a", "b"])[0] == (2, 2, 0)
    counts, after_w2 = _state_crawl(tmp_path, w2, ["b", "c"])
    assert counts == (2, 1, 1)
    assert after_w2 == {"a": (t1, t1, t2), "b": (t1, t2, None), "c": (t2, t2, None)}

    counts, state = _state_crawl(tmp_path, w1, ["a", "b"], reused=True)
    assert counts == (2, 2, 0)  # as week 1 counted when it finished
    assert state == after_w2

    counts, state = _state_crawl(tmp_path, w3, ["b", "c"])
    assert counts == (2, 0, 0) and state["a"] == (t1, t1, t2)


def test_an_older_crawl_merged_after_a_later_one_lowers_first_seen_only(tmp_path):
    """A state that starts at week 2 (b, c), then week 1's crawl (a, b) merged: b was first seen in week 1, its last
    sighting stays week 2; c is not gone. a, which only the older crawl saw, enters the state as seen then (the
    state does not record which crawls ran, so nothing in it says that week 2 missed a)."""
    from datetime import datetime

    w1, w2 = "2026-07-06T10:00:00+00:00", "2026-07-13T10:00:00+00:00"
    t1, t2 = datetime.fromisoformat(w1), datetime.fromisoformat(w2)
    _state_crawl(tmp_path, w2, ["b", "c"])
    counts, state = _state_crawl(tmp_path, w1, ["a", "b"])
    assert counts[2] == 0
    assert state["b"] == (t1, t2, None) and state["c"] == (t2, t2, None)
    assert state["a"] == (t1, t1, None)


def test_an_older_sighting_after_the_states_last_one_takes_its_row_and_keeps_the_later_gone(tmp_path):
    """Merged out of order: week 1 saw a, week 3 did not (a gone at week 3); week 2's crawl, merged last, saw a:
    a's last sighting becomes week 2, and it stays gone since week 3."""
    from datetime import datetime

    w1, w2, w3 = (f"2026-07-{d:02d}T10:00:00+00:00" for d in (6, 13, 20))
    t1, t2, t3 = (datetime.fromisoformat(w) for w in (w1, w2, w3))
    _state_crawl(tmp_path, w1, ["a", "b"])
    _state_crawl(tmp_path, w3, ["b"])
    counts, state = _state_crawl(tmp_path, w2, ["a", "b"])
    assert counts[2] == 0 and state["a"] == (t1, t2, t3) and state["b"] == (t1, t3, None)


def test_a_replayed_week_s_rows_stamped_today_do_not_leave_items_gone(tmp_path):
    """A backfill replays weeks in order into an empty state. A week's rejected row for a request that got no
    answer (here a max_pages cut) is stamped when the replay wrote it, today: the crawl's time is still its
    fetched pages' (week 2), so a, missed in week 2 and back in week 3, is present again after week 3, as live."""
    from datetime import datetime, timezone

    w1, w2, w3 = (f"2026-07-{d:02d}T10:00:00+00:00" for d in (6, 13, 20))
    t1, t2, t3 = (datetime.fromisoformat(w) for w in (w1, w2, w3))
    today = datetime.now(timezone.utc).isoformat()
    cut = {"kind": "page", "site": "shop", "url": "http://127.0.0.1:8123/p/zz.html", "status": 0,
           "outcome": "rejected", "reason": "max_pages_reached", "crawled_at": today}
    _state_crawl(tmp_path, w1, ["a", "b"])
    counts, state = _state_crawl(tmp_path, w2, ["b"], extra_pages=[cut])
    assert counts[2] == 1 and state["a"] == (t1, t1, t2)  # gone at week 2's time, not today
    counts, state = _state_crawl(tmp_path, w3, ["a", "b"])
    assert state["a"] == (t1, t3, None) and state["b"] == (t1, t3, None)


def test_a_crawl_that_kept_nothing_leaves_the_state_as_it_was(tmp_path):
    """A replayed week whose only row is a 404 for its start page (not archived; stamped today): no time of its
    own, nothing of what the shop lists, so no item is marked gone (before, every item was, at today's date, and a
    later week that saw them again could not bring them back)."""
    from datetime import datetime, timezone

    w1, w2, w3 = (f"2026-07-{d:02d}T10:00:00+00:00" for d in (6, 13, 20))
    t1, t3 = datetime.fromisoformat(w1), datetime.fromisoformat(w3)
    lost = {"kind": "page", "site": "shop", "url": "http://127.0.0.1:8123/", "status": 404, "outcome": "rejected",
            "reason": "http_404", "crawled_at": datetime.now(timezone.utc).isoformat()}
    _, before = _state_crawl(tmp_path, w1, ["a", "b"])
    counts, state = _state_crawl(tmp_path, w2, [], extra_pages=[lost])
    assert counts == (0, 0, 0) and state == before
    counts, state = _state_crawl(tmp_path, w3, ["a"])
    assert counts[2] == 1 and state["a"] == (t1, t3, None) and state["b"] == (t1, t1, t3)


def test_a_crawl_read_back_counts_its_new_and_gone_products_as_it_did(tmp_path):
    """A build's crawl line said ``products 2 (new 1, gone 1)``; the unchanged rerun reads back that same finished
    crawl and said ``new 0`` (its own products were in the state already): the same crawl read back twice prints
    the same counts."""
    def crawl(when, titles, reused=False):
        return _state_crawl(tmp_path, when, titles, reused)[0]

    assert crawl("2026-07-06T10:00:00+00:00", ["a", "b"]) == (2, 2, 0)
    week2 = "2026-07-13T10:00:00+00:00"
    assert crawl(week2, ["b", "c"]) == (2, 1, 1)  # c new, a gone
    assert crawl(week2, ["b", "c"], reused=True) == (2, 1, 1)  # read back: as it was
    assert crawl(week2, ["b", "c"], reused=True) == (2, 1, 1)
