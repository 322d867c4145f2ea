"""Product and look extraction from HTML pages (schema.org JSON-LD, microdata, RDFa, OpenGraph; CSS fallback rules).

Pure functions of (HTML, URL, rules): the Scrapy spider calls them on live responses, and the same calls re-run them
on archived pages, so extraction is reproducible without the network.

The modules, each importing only those above it in this list (and ``pagetext``, ``renditions``, ``config``):
``jsonld`` (the bottom: lenient JSON-LD, schema.org tree helpers), ``images`` (``srcset``, a rule's image URLs,
each picture's largest rendition), ``offers`` (``parse_price``, an item's offers), ``identity`` (``clean_value``,
``choose_identifier``, ``_collapse``, ``_colour_identity``, ``product_key``), ``sources`` (one function per product
source, ``decode_html``, ``shopify_products``), ``products`` (``extract_products``, ``main_product``, the buy box,
``_page_reference``), ``looks`` (``extract_look``). Every name the former single module defined is importable
from here, and so is ``is_full_size`` (``renditions``).
"""

from ..renditions import is_full_size
from .identity import canonical, choose_identifier, clean_value, path_key, product_key
from .images import page_image_urls, parse_srcset, select
from .jsonld import SYNTAXES, parse_jsonld, parse_jsonld_block
from .looks import extract_look
from .offers import ZERO_DECIMAL_CURRENCIES, parse_price
from .products import extract_products, main_product, page_title_of
from .sources import decode_html, shopify_products

# The private helpers, importable from here as from the former single module (docs name some: ``_collapse``,
# ``_colour_identity``, ``_page_reference``, ``_buy_box``).
from .identity import (_IDENTIFIER_KEYS, _MAX_FIELD_WORDS, _SEP, _collapse, _colour_identity,  # noqa: E402, F401
                       _group_id, _identifiers, _merge, _norm)
from .images import _absolute, _best_attr, _full_size, _image_urls, _page_renditions  # noqa: E402, F401
from .jsonld import _WRAPPERS, _XML_DECL, _first, _short_keys, _text, _types, _walk  # noqa: E402, F401
from .looks import _look_image, _rule_urls  # noqa: E402, F401
from .offers import (_MACHINE_NUMBER, _ci, _dig_amount, _offer_availability, _offer_colour,  # noqa: E402, F401
                     _offer_price, _offers)
from .products import (_CORE, _NOT_BUYABLE, _OLD_NEAR_PRICE, _buy_box, _old_price_markup, _order,  # noqa: E402, F401
                       _page_reference, log)
from .sources import (_COLOUR_OPTION, _PRODUCT_TYPES, _from_opengraph, _from_rules,  # noqa: E402, F401
                      _from_schema_node, _from_state, _from_visible, _property_values, _schema_products,
                      _split_offer_colours)

__all__ = ["SYNTAXES", "ZERO_DECIMAL_CURRENCIES", "canonical", "choose_identifier", "clean_value", "decode_html",
           "extract_look", "extract_products", "is_full_size", "main_product", "page_image_urls", "page_title_of",
           "parse_jsonld", "parse_jsonld_block", "parse_price", "parse_srcset", "path_key", "product_key", "select",
           "shopify_products"]
