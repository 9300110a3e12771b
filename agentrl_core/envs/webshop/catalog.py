"""The generated product catalogue: a few thousand seeded, deterministic products, built once per process.

Product i is drawn from `random.Random(f"webshop-v1:product:{seed}:{i}")`: a product type (see
vocab.py), a brand, 2-4 of the type's attributes, 2-4 values of each of the type's options, a
price in the type's range, a title, a description, feature bullets and reviews. The fields mirror
WebShop's product records (asin, Title, product_category, query, Attributes, options, Price,
Description, BulletPoints, Reviews, Rating). The same (size, seed) always gives the same catalogue.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from agentrl_core.envs.webshop.vocab import (
    BRAND_PARTS,
    DESCRIPTION_FRAMES,
    FEATURE_FRAMES,
    PRODUCT_TYPES,
    REVIEW_TEXTS,
    TITLE_TAILS,
    ProductType,
)

DEFAULT_SIZE = 3000
DEFAULT_SEED = 0
_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Review:
    """One customer review: score (1-5), title, body."""

    score: int
    title: str
    body: str


@dataclass(frozen=True)
class Product:
    """One catalogue item (WebShop's product record, typed and immutable)."""

    index: int
    asin: str
    type_key: str
    category: str  # top-level store department, e.g. "Beauty & Personal Care"
    product_category: str  # breadcrumb joined by " › ", as WebShop stores it
    query: str  # the search query the product belongs to (WebShop's `query`)
    title: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, values), in display order
    price: float
    description: str
    bullet_points: tuple[str, ...]
    reviews: tuple[Review, ...]

    @property
    def rating(self) -> str:
        """Mean review score to one decimal, or "N.A." without reviews (as WebShop shows it)."""
        if not self.reviews:
            return "N.A."
        return f"{sum(r.score for r in self.reviews) / len(self.reviews):.1f}"

    @property
    def price_tag(self) -> str:
        """The price as the pages show it, e.g. "$12.99"."""
        return f"${self.price:.2f}"

    def option_values(self, name: str) -> tuple[str, ...]:
        """The values of option `name` ((), when the product has no such option)."""
        return dict(self.options).get(name, ())

    def search_text(self) -> str:
        """What the search index sees: title, description, features, attributes and option values."""
        values = [v for _, vs in self.options for v in vs]
        return " ".join([self.title, self.description, *self.bullet_points, *self.attributes, *values])


@dataclass(frozen=True, eq=False)
class Catalog:
    """An immutable catalogue: products in index order, plus an asin -> index map."""

    products: tuple[Product, ...]
    seed: int
    asin_index: Mapping[str, int]

    def __len__(self) -> int:
        return len(self.products)

    def by_asin(self, asin: str) -> Product | None:
        """The product with this asin (case-insensitive), or None."""
        index = self.asin_index.get(asin.upper())
        return None if index is None else self.products[index]


# -- generation ----------------------------------------------------------------------------------
def _asin(rng: random.Random, taken: set[str]) -> str:
    """A fresh 10-character Amazon-style id, "B0" + 8 characters."""
    for _ in range(100):
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            return asin
    raise RuntimeError("could not draw a fresh asin in 100 tries")  # 36**8 ids: never in practice


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(BRAND_PARTS) for _ in range(rng.choice((2, 2, 3)))).capitalize()


def _title(rng: random.Random, brand: str, ptype: ProductType, attributes: tuple[str, ...]) -> str:
    """Brand, up to two of the attributes, the type noun, an optional tail: WebShop-like titles."""
    shown = [a.title() for a in attributes[: rng.choice((1, 2))]]
    tail = rng.choice(TITLE_TAILS)
    title = f"{brand} {' '.join(shown[:1])} {ptype.noun}"
    if len(shown) > 1:
        title += f", {shown[1]}"
    return f"{title} - {tail}" if tail else title


def _options(rng: random.Random, ptype: ProductType) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """2-4 values of each option of the type (all of them when the pool is smaller), in pool order."""
    chosen = []
    for name, pool in ptype.options:
        k = min(len(pool), rng.randint(2, 4))
        picked = set(rng.sample(pool, k))
        chosen.append((name, tuple(v for v in pool if v in picked)))
    return tuple(chosen)


def _reviews(rng: random.Random) -> tuple[Review, ...]:
    picks = rng.sample(REVIEW_TEXTS, rng.randint(0, 3))
    return tuple(Review(score, title, body) for score, title, body in picks)


def make_product(index: int, seed: int, asin: str, rng: random.Random) -> Product:
    """Product `index` of the catalogue with `seed` (all randomness from `rng`)."""
    ptype = rng.choice(PRODUCT_TYPES)
    brand = _brand(rng)
    attributes = tuple(rng.sample(ptype.attributes, min(len(ptype.attributes), rng.randint(2, 4))))
    low, high = ptype.price
    description = rng.choice(DESCRIPTION_FRAMES).format(brand=brand, noun=ptype.noun.lower(), first=attributes[0])
    bullets = tuple(rng.choice(FEATURE_FRAMES).format(Attr=a.capitalize()) for a in attributes)
    return Product(
        index=index, asin=asin, type_key=ptype.key, category=ptype.breadcrumb[0],
        product_category=" › ".join(ptype.breadcrumb), query=ptype.query,
        title=_title(rng, brand, ptype, attributes), attributes=attributes, options=_options(rng, ptype),
        price=round(rng.uniform(low, high), 2), description=description, bullet_points=bullets,
        reviews=_reviews(rng),
    )


@lru_cache(maxsize=4)
def build_catalog(size: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED) -> Catalog:
    """The catalogue of `size` products for `seed` (cached: built once per process and arguments)."""
    if size < len(PRODUCT_TYPES):
        raise ValueError(f"catalogue size must be >= {len(PRODUCT_TYPES)} (one per product type), got {size}")
    products: list[Product] = []
    taken: set[str] = set()
    for index in range(size):
        rng = random.Random(f"webshop-v1:product:{seed}:{index}")
        product = make_product(index, seed, _asin(rng, taken), rng)
        taken.add(product.asin)
        products.append(product)
    return Catalog(tuple(products), seed, MappingProxyType({p.asin: p.index for p in products}))
