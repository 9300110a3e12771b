"""The pages of the shop as WebShop's "text" observation mode shows them: visible texts joined by " [SEP] ".

Pages and their clickables (lower-cased, as WebShop's `text_to_clickable` keys):
- search:  "WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search"; the search bar only
           (WebShop lists "search", which is used through `search[...]`, never `click[...]`).
- results: "Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] Page 1 (Total results: 50)
           [SEP] < Prev [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ..."; `< Prev` only
           after page 1, `Next >` only while more results follow; the asins are clickable.
- item:    "... [SEP] Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP] <title>
           [SEP] Price: $x [SEP] Rating: r [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now";
           option values are clickable.
- sub:     Description / Features / Reviews: "... [SEP] Back to Search [SEP] < Prev [SEP] <content>".
- done:    "Thank you for shopping with us! [SEP] ... [SEP] Your score (min 0.0, max 1.0) [SEP] <reward>".
As in WebShop's simple text mode, chosen options are not marked on the item page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from agentrl_core.envs.webshop.catalog import Catalog, Product
from agentrl_core.envs.webshop.search import page_count, page_of

SEP = " [SEP] "
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")

PageKind = Literal["search", "results", "item", "sub", "done"]


@dataclass(frozen=True)
class Button:
    """A page button (Back to Search, < Prev, Next >, Description, Features, Reviews, Buy Now)."""

    label: str


@dataclass(frozen=True)
class ProductLink:
    """A product's asin on a results page."""

    index: int


@dataclass(frozen=True)
class OptionChoice:
    """One value of one option on an item page."""

    name: str
    value: str


Clickable = Button | ProductLink | OptionChoice


@dataclass
class Session:
    """Where the shopper is: the page, the last search, the product open, the options chosen."""

    page: PageKind = "search"
    keywords: str = ""
    results: tuple[int, ...] = ()
    page_no: int = 1
    product: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str = ""
    reward: float = 0.0


# -- clickables ----------------------------------------------------------------------------------
def _buttons(*labels: str) -> dict[str, Clickable]:
    return {label.lower(): Button(label) for label in labels}


def _results_clickables(session: Session, catalog: Catalog) -> dict[str, Clickable]:
    labels = [BACK_TO_SEARCH]
    if session.page_no > 1:
        labels.append(PREV_PAGE)
    if session.page_no < page_count(session.results):
        labels.append(NEXT_PAGE)
    links = {catalog.products[i].asin.lower(): ProductLink(i) for i in page_of(session.results, session.page_no)}
    return _buttons(*labels) | links


def _item_clickables(product: Product) -> dict[str, Clickable]:
    clickables = _buttons(BACK_TO_SEARCH, PREV_PAGE)
    for name, values in product.options:
        clickables |= {value.lower(): OptionChoice(name, value) for value in values}
    return clickables | _buttons(*SUB_PAGES, BUY_NOW)


def clickables(session: Session, catalog: Catalog) -> dict[str, Clickable]:
    """Lower-cased clickable text -> what it does, for the current page (in page order)."""
    if session.page == "results":
        return _results_clickables(session, catalog)
    if session.page == "item" and session.product is not None:
        return _item_clickables(catalog.products[session.product])
    if session.page == "sub":
        return _buttons(BACK_TO_SEARCH, PREV_PAGE)
    return {}


def available_actions(session: Session, catalog: Catalog) -> dict[str, object]:
    """WebShop's get_available_actions(): {"has_search_bar": bool, "clickables": [...]}."""
    if session.page == "search":
        return {"has_search_bar": True, "clickables": ["search"]}
    return {"has_search_bar": False, "clickables": list(clickables(session, catalog))}


# -- rendering -----------------------------------------------------------------------------------
def _results_texts(session: Session, catalog: Catalog) -> list[str]:
    texts = [BACK_TO_SEARCH, f"Page {session.page_no} (Total results: {len(session.results)})"]
    if session.page_no > 1:
        texts.append(PREV_PAGE)
    if session.page_no < page_count(session.results):
        texts.append(NEXT_PAGE)
    for i in page_of(session.results, session.page_no):
        product = catalog.products[i]
        texts += [product.asin, product.title, product.price_tag]
    return texts


def _item_texts(product: Product) -> list[str]:
    texts = [BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product.options:
        texts += [name, *values]
    texts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}", *SUB_PAGES, BUY_NOW]
    return texts


def _sub_texts(product: Product, sub_page: str) -> list[str]:
    texts = [BACK_TO_SEARCH, PREV_PAGE]
    if sub_page == "Description":
        return texts + [product.description]
    if sub_page == "Features":
        return texts + (list(product.bullet_points) or ["No Features"])
    if not product.reviews:
        return texts + ["No reviews found"]
    for review in product.reviews:
        texts += [f'"{review.title}"', str(review.score), review.body]
    return texts


def _done_texts(session: Session, catalog: Catalog) -> list[str]:
    asin = catalog.products[session.product].asin if session.product is not None else ""
    return [
        "Thank you for shopping with us!", "Purchased", "asin", asin, "options",
        json.dumps(session.options, sort_keys=True), "Your score (min 0.0, max 1.0)", f"{session.reward:g}",
    ]


def render(session: Session, catalog: Catalog, instruction: str) -> str:
    """The observation text of the current page."""
    if session.page == "search":
        return SEP.join(["WebShop", "Instruction:", instruction, "Search"])
    if session.page == "done":
        return SEP.join(_done_texts(session, catalog))
    head = ["Instruction:", instruction]
    if session.page == "results":
        return SEP.join(head + _results_texts(session, catalog))
    product = catalog.products[session.product] if session.product is not None else None
    if product is None:
        raise ValueError(f"page {session.page!r} needs an open product")
    if session.page == "item":
        return SEP.join(head + _item_texts(product))
    return SEP.join(head + _sub_texts(product, session.sub_page))
