"""A history page read back: the cells, rows and figures its HTML shows."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    """The history page's hooks as the browser's DOM holds them."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.nights: list[dict[str, str]] = []
        self.change_points: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-cell-id" in a:
            self.rows[a["data-cell-id"]] = a
        if tag == "td" and "night" in a.get("class", "").split():
            self.nights.append(a)
        if tag == "circle" and a.get("class") == "cp":
            self.change_points.append(a)


def read_page(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page
