"""Prices and offers: ``parse_price`` (amount and currency, ``ZERO_DECIMAL_CURRENCIES``) and what a schema.org
``offers`` tree says of an item (its Offer nodes, price, availability and colour)."""

from __future__ import annotations

import re
from typing import Any

from price_parser import Price

from ..pagetext import normalise_availability
from .jsonld import _first, _text, _walk

_MACHINE_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")


# ISO 4217 currencies whose minor unit is 0 (no decimals): an amount written "24.990" in one of them has a
# thousands separator, not a decimal point (ISO 4217 list one, the "minor unit" column).
ZERO_DECIMAL_CURRENCIES = {"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI",
                           "VND", "VUV", "XAF", "XOF", "XPF"}


def parse_price(amount: Any, currency: Any = None) -> tuple[float | None, str | None]:
    """Parse a price and its currency with ``price-parser``: ``("1.299,00 €", None) -> (1299.0, "€")``.

    A number written for machines (``"1234.5"``, a JSON number) uses ``.`` as the decimal point, except that
    ``d.ddd`` in a currency without decimals (``ZERO_DECIMAL_CURRENCIES``: CLP, JPY, KRW…) is a thousands
    separator (``("24.990", "CLP") -> 24990.0``). Returns ``(None, currency)`` for a negative (a minus before the
    number: ``"€-5"``), NaN, infinite or unreadable amount (scientific notation, an integer too large for a float)."""
    import math

    if amount is None:
        return None, _text(currency)
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        return None, _text(currency)
    if isinstance(amount, (int, float)):
        try:
            value = float(amount)
        except OverflowError:  # a JSON integer of hundreds of digits
            return None, _text(currency)
    elif _SCIENTIFIC.search(amount):
        return None, _text(currency)  # "1e309", "$1e5": price-parser would read the mantissa's first digit
    elif _MACHINE_NUMBER.match(amount.strip()):
        value = float(amount.strip())  # schema.org prices use "." as the decimal point ("1.234" is 1.234)
        code = (_text(currency) or "").upper()
        if code in ZERO_DECIMAL_CURRENCIES and re.fullmatch(r"\d{1,3}\.\d{3}", amount.strip()):
            value = float(amount.strip().replace(".", ""))  # "24.990" CLP: a thousands separator, 24990
    else:
        p = Price.fromstring(amount, currency_hint=_text(currency))
        value = float(p.amount) if p.amount is not None else None
        currency = currency or p.currency
        first_digit = re.search(r"\d", amount)
        if value is not None and first_digit and re.search("[-\u2212]", amount[:first_digit.start()]):
            value = -value  # a minus before the number ("-5", "€-5", "EUR −5"), not in a range ("10 - 20")
    if value is None or not math.isfinite(value) or value < 0:
        return None, _text(currency)  # a negative, NaN or infinite price is not a price
    return value, _text(currency)


def _ci(d: dict, key: str) -> Any:
    """``d[key]`` with a case-insensitive key (shops write ``lowprice``, ``PriceCurrency``…)."""
    if key in d:
        return d[key]
    low = key.lower()
    return next((v for k, v in d.items() if isinstance(k, str) and k.lower() == low), None)


def _dig_amount(v: Any) -> tuple[Any, Any]:
    """A price written as an object (``{"sales": {"value": 3499, "currency": "ARS"}}``): the first nested
    ``value`` / ``amount`` / ``price`` and its ``currency``."""
    for node in _walk(v):
        for k in ("value", "amount", "price", "decimalPrice"):
            amount = _ci(node, k)
            if amount is not None and not isinstance(amount, (dict, list)):
                return amount, _ci(node, "currency") or _ci(node, "priceCurrency")
    return None, None


def _offers(v: Any) -> list[dict]:
    """Every Offer node under ``offers`` (an AggregateOffer's nested ``offers`` flattened after it)."""
    out: list[dict] = []
    for offer in v if isinstance(v, list) else [v]:
        if isinstance(offer, dict):
            out.append(offer)
            nested = offer.get("offers")
            if nested is not None and nested is not offer:
                out.extend(_offers(nested))
    return out


def _offer_price(offers: Any) -> tuple[float | None, str | None]:
    for offer in _offers(offers):
        amount = _ci(offer, "price")
        if amount is None:
            amount = _ci(offer, "lowPrice")
        if isinstance(amount, (dict, list)):
            amount, cur = _dig_amount(amount)
            if cur and not _ci(offer, "priceCurrency"):
                offer = {**offer, "priceCurrency": cur}
        if amount is None and isinstance(offer.get("priceSpecification"), (dict, list)):
            spec = _first(offer["priceSpecification"])
            amount = spec.get("price") if isinstance(spec, dict) else None
            if isinstance(spec, dict) and not offer.get("priceCurrency"):
                offer = {**offer, "priceCurrency": spec.get("priceCurrency")}
        if amount is not None:
            price, cur = parse_price(amount, _ci(offer, "priceCurrency"))
            if price is not None:
                return price, cur
    return None, None


def _offer_availability(offers: Any) -> str | None:
    """One availability for the item: ``InStock`` when any offer is in stock (a size still sold), else the first
    offer's value (schema.org short name, ``pagetext.normalise_availability``)."""
    values = [normalise_availability(_ci(o, "availability")) for o in _offers(offers)]
    values = [v for v in values if v]
    if not values:
        return None
    return "InStock" if "InStock" in values else values[0]


def _offer_colour(offer: dict) -> str | None:
    item = _first(offer.get("itemOffered"))
    return _text(offer.get("color") or (item.get("color") if isinstance(item, dict) else None))
