"""Product fields from what a page shows and from the state JSON its scripts carry, for pages without schema.org.

Two lower-trust sources of ``lookbench_pipeline.extract`` (most trusted first: JSON-LD, microdata, RDFa, inline
state JSON, OpenGraph, the site's own rules, the visible page):

- ``state_products``: product-like objects inside the JSON a page ships for its scripts: ``<script
  type="application/json">`` (Next.js ``__NEXT_DATA__`` among them), and ``window.X = {…}`` /
  ``__INITIAL_STATE__`` / ``__PRELOADED_STATE__`` assignments, parsed with ``chompjs`` (JavaScript object literals,
  not strict JSON). An object counts as a product when it has a name and a price or an identifier under the keys
  shops use for them.
- ``shopify_analytics_product``: the product a Shopify storefront describes in its analytics ``meta`` object.
- ``visible_product``: the page's ``<h1>`` (the one its ``<title>`` names; else ``og:title``, else ``<title>``),
  the first current price shown in an element marked as a price (struck-through, "was", unit and instalment
  prices skipped, and so are the prices of a listing's cards), else the price beside a struck-through one, else
  the price printed before the buy control; identifiers by their visible label ("SKU", "Art.-Nr.", "Item #",
  "Ref.", "Код" …) or in the URL; availability from the page's stock message (not from a template repeated on
  every listed product).
- ``buy_control`` and ``price_candidates``: the buy box's enabled "add to cart" control and the current and old
  prices it shows, which ``extract`` uses to reconcile structured data with what the page offers.

Rules here are general: none names a shop. Per-site selectors belong in the site's YAML (``product_rules``).

The modules, each importing only those above it in this list: ``nodes`` (the bottom: visible text, marked, hidden
and repeated elements), ``availability``, ``identifiers``, ``price`` (the buy box: ``buy_control``,
``price_candidates``, ``visible_price``), ``state`` (state JSON, Shopify's analytics object), ``page`` (``page_title``,
``visible_product``, ``page_images``). Every name the former single module had is importable from here.
"""

from .availability import AVAILABILITY, availability_from_text, normalise_availability, page_availability
from .identifiers import is_placeholder, labelled_identifier, url_identifier
from .page import page_images, page_title, visible_product
from .price import buy_control, price_candidates, visible_price
from .state import shopify_analytics_product, state_documents, state_products

# The private helpers, importable from here as from the former single module (docs name some: ``_in_card``).
from .availability import _AVAIL_LOWER, _AVAIL_WORDS, _IN_PHRASES, _OUT_PHRASES  # noqa: E402, F401
from .identifiers import (_CODE, _FORM_TAGS, _ID_LABEL, _ID_MARKS, _ID_PARAMS, _LETTERED_NUMBER,  # noqa: E402, F401
                          _MODEL_LABEL, _PLACEHOLDER, _body_texts, _identifier_nodes)
from .nodes import (_HIDING_CLASSES, _NO_TEXT, _VISIBLE, _hidden, _lc, _marked, _marked_nodes,  # noqa: E402, F401
                    _node_text, _repeated, _text_of)
from .price import (_BUY_NAME, _BUY_TEXT, _CURRENCY, _NOT_BUY, _OLD, _PRICE_TEXT, _STRUCK,  # noqa: E402, F401
                    _STRUCK_TAGS, _in_card, _shape, _template)
from .state import (_ASSIGN, _NAME_KEYS, _PRICE_KEYS, _SHOPIFY_META, _SKU_KEYS, _get, _scalar,  # noqa: E402, F401
                    _walk)

__all__ = ["AVAILABILITY", "availability_from_text", "buy_control", "is_placeholder", "labelled_identifier",
           "normalise_availability", "page_availability", "page_images", "page_title", "price_candidates",
           "shopify_analytics_product", "state_documents", "state_products", "url_identifier", "visible_price",
           "visible_product"]
