"""The embedded demo shop: a small fashion site the project generates itself, so the default build needs no
outside data. (Over 500 lines on purpose: one deterministic generator of the catalogue, its pictures and its pages
from one seed; the drawing, the plan and the pages share its random stream, so they stay in one module.)

Garments are drawn procedurally (a silhouette per category, filled with a colour and a pattern), so every product's
category and attributes are known and the evaluation table means something. Each product has two photos:

* position 0, a packshot: the garment centred on white (what a gallery holds);
* position 1, an alternative shot: rotated, scaled, shifted, on a tinted, noisy background (what a query holds).

"Shop the look" pages show a street scene with two to four products composited at known, jittered boxes and link
those products; the boxes are also written as COCO ground truth beside the look images
(``images/looks/boxes.coco.json``), and :func:`write_training_looks` draws more, unpublished looks for training the
demo detector.
Some products are sold in two or three colours (``colour_variants``): each colour is its own item with its own
sku and photos drawn in that colour, on one page per model (a schema.org ``ProductGroup``), sizes of a colour being
one item; the ground truth names each colour's model (``group``).
The site has a ``robots.txt`` that disallows ``/private/`` (a page linked from the index that must never be
fetched), a ``sitemap.xml``, and an ``about`` page without product data (a recorded rejection).
"""

from __future__ import annotations

import html
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

COLORS: dict[str, tuple[int, int, int]] = {
    "black": (25, 25, 28), "white": (238, 236, 230), "grey": (128, 128, 132), "red": (200, 30, 40),
    "pink": (240, 140, 180), "orange": (240, 130, 30), "yellow": (240, 210, 40), "green": (40, 140, 60),
    "blue": (30, 70, 190), "purple": (120, 50, 160), "brown": (120, 75, 40), "beige": (215, 195, 160),
}
PATTERNS = ["solid", "striped", "dotted", "checked"]
MATERIALS = {"top": "cotton", "shirt": "linen", "dress": "silk", "skirt": "wool", "trousers": "denim",
             "shorts": "cotton", "outerwear": "wool", "shoes": "leather", "bag": "leather", "sweater": "wool"}
NOUNS = {"top": "t-shirt", "shirt": "shirt", "dress": "dress", "skirt": "skirt", "trousers": "trousers",
         "shorts": "shorts", "outerwear": "coat", "shoes": "sneakers", "bag": "tote bag", "sweater": "sweater"}
CATEGORIES = list(NOUNS)
SLOT_CATEGORIES = {"upper": {"top", "shirt", "sweater", "outerwear"}, "lower": {"trousers", "skirt", "shorts"}}
SLEEVES = {"short": "short-sleeve", "long": "long-sleeve", "sleeveless": "sleeveless"}
LENGTHS = {"mini": "mini", "knee": "knee-length", "maxi": "maxi"}


@dataclass
class DemoProduct:
    sku: str
    category: str
    color: str
    pattern: str
    material: str
    sleeve: str | None = None
    length: str | None = None
    shape_seed: int = 0
    price: float = 0.0
    group: str | None = None  # the model this colour belongs to, when the model is sold in several colours
    scale: float = 1.0  # the garment's size on its photos (a look-alike is drawn smaller, so its photos differ)
    look_alike_of: str | None = None  # another item with the same category and every attribute (plan)

    @property
    def slug(self) -> str:
        return self.sku.lower()

    @property
    def title(self) -> str:
        parts = [self.color.capitalize(), self.pattern]
        if self.sleeve:
            parts.append(SLEEVES[self.sleeve])
        if self.length:
            parts.append(LENGTHS[self.length])
        parts.append(NOUNS[self.category])
        return " ".join(parts)

    @property
    def truth(self) -> dict[str, str]:
        """The attributes the picture really shows (what a perfect annotator would say)."""
        t = {"color": self.color, "pattern": self.pattern, "material": self.material}
        if self.sleeve:
            t["sleeve_length"] = self.sleeve
        if self.length:
            t["length"] = self.length
        return t


@dataclass
class DemoLook:
    number: int
    skus: list[str]
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)


def plan(n_products: int, n_looks: int, seed: int) -> tuple[list[DemoProduct], list[DemoLook]]:
    """Choose distinct (category, colour, pattern) products and looks that combine them; deterministic in seed."""
    rng = random.Random(seed)
    combos = [(c, col, p) for c in CATEGORIES for col in COLORS for p in PATTERNS]
    rng.shuffle(combos)
    # spread categories evenly: round-robin over categories
    by_cat: dict[str, list] = {c: [x for x in combos if x[0] == c] for c in CATEGORIES}
    chosen = []
    while len(chosen) < n_products:
        for c in CATEGORIES:
            if len(chosen) < n_products and by_cat[c]:
                chosen.append(by_cat[c].pop())
    products = []
    for i, (cat, col, pat) in enumerate(chosen):
        p = DemoProduct(sku=f"DEMO-{i:04d}", category=cat, color=col, pattern=pat, material=MATERIALS[cat],
                        shape_seed=rng.randrange(1 << 30), price=round(rng.uniform(9, 240), 2))
        if cat in ("top", "shirt", "dress", "sweater"):
            p.sleeve = rng.choice(["short", "long"] if cat != "dress" else ["short", "long", "sleeveless"])
        if cat in ("dress", "skirt"):
            p.length = rng.choice(list(LENGTHS))
        products.append(p)
    _look_alikes(products, n_products // LOOK_ALIKE_EVERY)
    looks = [DemoLook(number=n, skus=_look_items(rng, products)) for n in range(n_looks)]
    return products, looks


LOOK_ALIKE_EVERY = 8
"""One planned product in this many is redrawn as a look-alike of another (``_look_alikes``)."""


def _look_alikes(products: list[DemoProduct], n_pairs: int) -> None:
    """Make ``n_pairs`` pairs of distinct items that agree on category and every attribute, in place: a later
    planned product of the same category as an earlier one takes the earlier one's colour, pattern, material, sleeve
    and length, keeps its own sku, shape and price, and is drawn at 80% size, so its photos are other pictures (not
    near-duplicates) of an item no label tells apart. This is what Fine Recall exists to show: such an item ranked
    first is a Fine hit and an exact-item miss (docs/METRICS.md)."""
    taken: set[int] = set()
    pairs = 0
    for i, src in enumerate(products):
        if pairs >= n_pairs:
            break
        if i in taken:
            continue
        for j in range(len(products) - 1, i, -1):
            t = products[j]
            if j not in taken and t.category == src.category and t.group is None:
                products[j] = DemoProduct(sku=t.sku, category=src.category, color=src.color, pattern=src.pattern,
                                          material=src.material, sleeve=src.sleeve, length=src.length,
                                          shape_seed=t.shape_seed, price=t.price, scale=0.8, look_alike_of=src.sku)
                taken |= {i, j}
                pairs += 1
                break


def _look_items(rng: random.Random, products: list[DemoProduct]) -> list[str]:
    """The SKUs one look shows: an upper and a lower garment (or a dress with shoes or a bag), often shoes or a bag,
    and now and then two bags (two linked products of one category: the detections are told apart by how they
    look)."""
    by = lambda cats: [p for p in products if p.category in cats]  # noqa: E731
    uppers, lowers, dresses = by(SLOT_CATEGORIES["upper"]), by(SLOT_CATEGORIES["lower"]), by({"dress"})
    shoes, bags = by({"shoes"}), by({"bag"})
    if dresses and rng.random() < 0.2:
        items = [rng.choice(dresses).sku]
    else:
        items = [rng.choice(uppers).sku, rng.choice(lowers).sku]
    r = rng.random()
    if bags and len(bags) >= 2 and r < 0.2:
        items += [p.sku for p in rng.sample(bags, 2)]
    elif shoes and bags and r < 0.45:
        items += [rng.choice(shoes).sku, rng.choice(bags).sku]
    elif (shoes or bags) and (r < 0.8 or len(items) == 1):  # a look always shows two items at least
        items.append(rng.choice(shoes + bags).sku)
    return items


def _colour_distance(a: str, b: str) -> int:
    return sum(abs(x - y) for x, y in zip(COLORS[a], COLORS[b]))


def colour_variants(products: list[DemoProduct], n_models: int, seed: int) -> dict[str, list[DemoProduct]]:
    """Sell ``n_models`` of the planned products in two or three colours: ``{base sku: [base, other colours…]}``.

    Each model keeps its planned product as its first colour (its sku, photos and looks unchanged) and gets one or
    two more colours: the same garment (category, pattern, shape, sleeve, length, material, price) in a colour far
    from the others (sum of RGB differences of at least 200, so a colour variant is never a near-duplicate photo of
    another), with its own sku ``<base sku>-<COLOUR>`` and photos drawn in that colour. Every colour of a model has
    ``group = "MODEL-<number>"``. The base products are modified in place (their ``group``). Deterministic in
    ``seed``; the models are chosen among all planned products, the colours so that no two items share category,
    colour and pattern."""
    if n_models <= 0 or not products:
        return {}
    rng = random.Random(seed * 7919 + 104_729)
    used = {(p.category, p.color, p.pattern) for p in products}
    out: dict[str, list[DemoProduct]] = {}
    for i in sorted(rng.sample(range(len(products)), min(n_models, len(products)))):
        base = products[i]
        base.group = "MODEL-" + base.sku.rsplit("-", 1)[-1]
        family = [base]
        for _ in range(rng.choice([1, 2])):
            options = [c for c in COLORS if (base.category, c, base.pattern) not in used
                       and all(_colour_distance(c, f.color) >= 200 for f in family)]
            if not options:
                break
            colour = rng.choice(options)
            used.add((base.category, colour, base.pattern))
            family.append(DemoProduct(**{**base.__dict__, "sku": f"{base.sku}-{colour.upper()}", "color": colour,
                                          "look_alike_of": None}))
        out[base.sku] = family
    return out


def catalogue(n_products: int, n_looks: int, seed: int, n_colour_models: int) -> list[DemoProduct]:
    """Every item the demo shop sells (one per colour): the planned products and their other colours."""
    products, _ = plan(n_products, n_looks, seed)
    families = colour_variants(products, n_colour_models, seed)
    return [v for p in products for v in families.get(p.sku, [p])]


# ------------------------------------------------------------------------------------------------ drawing


def _pattern_fill(size: tuple[int, int], color: tuple[int, int, int], pattern: str, rng: random.Random) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, color)
    d = ImageDraw.Draw(img)
    contrast = (250, 250, 250) if sum(color) < 380 else (20, 20, 20)
    step = rng.randint(14, 22)
    if pattern == "striped":
        for y in range(0, h, step):
            d.rectangle([0, y, w, y + step // 2 - 1], fill=contrast)
    elif pattern == "dotted":
        r = step // 4
        for y in range(step // 2, h, step):
            for x in range(step // 2 + (y // step % 2) * step // 2, w, step):
                d.ellipse([x - r, y - r, x + r, y + r], fill=contrast)
    elif pattern == "checked":
        for y in range(0, h, step):
            for x in range(0, w, step):
                if (x // step + y // step) % 2 == 0:
                    d.rectangle([x, y, x + step - 1, y + step - 1], fill=contrast)
    return img


def _silhouette(p: DemoProduct, size: int = 256) -> Image.Image:
    """The garment's mask (mode L, size x size, 255 inside)."""
    rng = random.Random(p.shape_seed)
    s = size
    m = Image.new("L", (s, s), 0)
    d = ImageDraw.Draw(m)
    j = lambda a: int(a * s + rng.uniform(-0.02, 0.02) * s)  # noqa: E731  small per-product shape jitter
    c = p.category
    if c in ("top", "shirt", "sweater", "outerwear"):
        body_bottom = {"outerwear": 0.95, "sweater": 0.85}.get(c, 0.82)
        d.polygon([(j(.3), j(.12)), (j(.7), j(.12)), (j(.72), j(body_bottom)), (j(.28), j(body_bottom))], fill=255)
        sleeve_end = {"long": 0.75, "short": 0.38, None: 0.38}.get(p.sleeve, 0.75 if c == "outerwear" else 0.38)
        if c == "outerwear":
            sleeve_end = 0.8
        if p.sleeve != "sleeveless":
            d.polygon([(j(.3), j(.12)), (j(.08), j(sleeve_end)), (j(.18), j(sleeve_end + .03)), (j(.32), j(.35))], fill=255)
            d.polygon([(j(.7), j(.12)), (j(.92), j(sleeve_end)), (j(.82), j(sleeve_end + .03)), (j(.68), j(.35))], fill=255)
        d.ellipse([j(.42), j(.06), j(.58), j(.18)], fill=0)  # neckline
        if c == "shirt":
            d.polygon([(j(.42), j(.1)), (j(.5), j(.22)), (j(.58), j(.1))], fill=255)
    elif c == "dress":
        bottom = {"mini": 0.6, "knee": 0.78, "maxi": 0.96}[p.length or "knee"]
        d.polygon([(j(.36), j(.08)), (j(.64), j(.08)), (j(.62), j(.38)), (j(.8), j(bottom)),
                   (j(.2), j(bottom)), (j(.38), j(.38))], fill=255)
        if p.sleeve == "short":
            d.polygon([(j(.36), j(.08)), (j(.22), j(.25)), (j(.34), j(.3))], fill=255)
            d.polygon([(j(.64), j(.08)), (j(.78), j(.25)), (j(.66), j(.3))], fill=255)
        elif p.sleeve == "long":
            d.polygon([(j(.36), j(.08)), (j(.16), j(.6)), (j(.24), j(.62)), (j(.38), j(.3))], fill=255)
            d.polygon([(j(.64), j(.08)), (j(.84), j(.6)), (j(.76), j(.62)), (j(.62), j(.3))], fill=255)
        d.ellipse([j(.44), j(.03), j(.56), j(.13)], fill=0)
    elif c == "skirt":
        bottom = {"mini": 0.55, "knee": 0.75, "maxi": 0.95}[p.length or "knee"]
        d.polygon([(j(.35), j(.1)), (j(.65), j(.1)), (j(.82), j(bottom)), (j(.18), j(bottom))], fill=255)
    elif c in ("trousers", "shorts"):
        leg = 0.95 if c == "trousers" else 0.5
        d.polygon([(j(.28), j(.06)), (j(.72), j(.06)), (j(.76), j(leg)), (j(.53), j(leg)), (j(.5), j(.3)),
                   (j(.47), j(leg)), (j(.24), j(leg))], fill=255)
    elif c == "shoes":
        for dx in (0.0, 0.42):
            d.rounded_rectangle([j(.06 + dx), j(.55), j(.5 + dx), j(.78)], radius=int(s * .08), fill=255)
            d.rectangle([j(.06 + dx), j(.4), j(.24 + dx), j(.6)], fill=255)
    elif c == "bag":
        d.rectangle([j(.2), j(.35), j(.8), j(.9)], fill=255)
        d.arc([j(.32), j(.1), j(.68), j(.55)], 180, 360, fill=255, width=max(3, s // 28))
    return m


def draw_garment(p: DemoProduct, size: int = 256) -> Image.Image:
    """The garment as RGBA (transparent outside its silhouette), ``size`` x ``size`` pixels."""
    rng = random.Random(p.shape_seed ^ 0x5EED)
    fill = _pattern_fill((size, size), COLORS[p.color], p.pattern, rng).convert("RGBA")
    mask = _silhouette(p, size)
    fill.putalpha(mask)
    return fill


def packshot(p: DemoProduct) -> Image.Image:
    """Position-0 photo: garment centred on white, 320x400 pixels."""
    bg = Image.new("RGB", (320, 400), (255, 255, 255))
    side = int(280 * p.scale)
    g = draw_garment(p, side)
    bg.paste(g, (20 + (280 - side) // 2, 60 + (280 - side) // 2), g)
    return bg


def alt_shot(p: DemoProduct) -> Image.Image:
    """Position-1 photo: rotated, scaled and shifted garment on a tinted, noisy background, 320x400 pixels."""
    rng = random.Random(p.shape_seed ^ 0xA17)
    tint = tuple(rng.randint(200, 240) for _ in range(3))
    noise = np.random.default_rng(p.shape_seed).normal(128, 18, (400, 320)).clip(0, 255).astype(np.uint8)
    bg = Image.fromarray(noise, "L").convert("RGB")  # seeded: the same seed draws the same bytes
    bg = Image.blend(Image.new("RGB", (320, 400), tint), bg, 0.15)
    g = draw_garment(p, int(rng.randint(210, 250) * p.scale)).rotate(rng.uniform(-10, 10), expand=True, resample=Image.BICUBIC)
    bg.paste(g, (rng.randint(0, max(0, 320 - g.width)), rng.randint(40, max(41, 400 - g.height))), g)
    return bg.filter(ImageFilter.GaussianBlur(0.6))


def look_image(look: DemoLook, products: dict[str, DemoProduct]) -> Image.Image:
    """A street scene (640x800 pixels) with the look's garments composited where a person would wear or carry
    them, each placement jittered in position and size; fills ``look.boxes`` (x1, y1, x2, y2 in pixels, the
    garment's visible extent) in the order of ``look.skus``."""
    rng = random.Random(look.number * 7919)
    bg = Image.new("RGB", (640, 800))
    d = ImageDraw.Draw(bg)
    top, bottom = [rng.randint(90, 200) for _ in range(3)], [rng.randint(60, 150) for _ in range(3)]
    for y in range(800):
        t = y / 799
        d.line([(0, y), (640, y)], fill=tuple(int(a * (1 - t) + b * t) for a, b in zip(top, bottom)))
    for _ in range(6):  # street furniture
        x, y = rng.randint(0, 600), rng.randint(0, 760)
        d.rectangle([x, y, x + rng.randint(20, 120), y + rng.randint(20, 160)],
                    fill=tuple(rng.randint(40, 200) for _ in range(3)))
    # (x, y, size) of each slot; "extra" slots take shoes and bags, right side first
    slots = {"upper": (170, 90, 300), "lower": (190, 380, 260), "dress": (160, 90, 340)}
    extra_slots = [(420, 560, 180), (20, 540, 170)]
    look.boxes = []
    for sku in look.skus:
        p = products[sku]
        slot = next((k for k, cats in SLOT_CATEGORIES.items() if p.category in cats),
                    "dress" if p.category == "dress" else "extra")
        x, y, size = slots[slot] if slot != "extra" else extra_slots.pop(0) if extra_slots else (430, 40, 150)
        size = int(size * rng.uniform(0.85, 1.1))
        x, y = x + rng.randint(-30, 30), y + rng.randint(-20, 20)
        x, y = max(0, min(x, 640 - size)), max(0, min(y, 800 - size))
        g = draw_garment(p, size)
        bg.paste(g, (x, y), g)
        x1, y1, x2, y2 = g.getbbox() or (0, 0, size, size)
        look.boxes.append((x + x1, y + y1, x + x2, y + y2))
    return bg


def look_coco(looks: list[DemoLook], products: dict[str, DemoProduct], file_name) -> dict:
    """COCO-style ground truth of drawn looks (``look_image`` must have filled their boxes): one image per look
    (``file_name(look)``), one annotation per garment, ``bbox`` = [x, y, width, height] in pixels, the category
    = the garment's taxonomy category, and the garment's ``sku`` as an extra field."""
    cats = {c: i + 1 for i, c in enumerate(CATEGORIES)}
    images, anns = [], []
    for look in looks:
        images.append({"id": look.number, "file_name": file_name(look), "width": 640, "height": 800})
        for sku, (x1, y1, x2, y2) in zip(look.skus, look.boxes):
            anns.append({"id": len(anns) + 1, "image_id": look.number, "category_id": cats[products[sku].category],
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0,
                         "sku": sku})
    return {"info": {"description": "LookBench demo shop looks: garments composited on scenes at known boxes"},
            "images": images, "annotations": anns,
            "categories": [{"id": i, "name": c, "supercategory": "garment"} for c, i in cats.items()]}


def write_training_looks(root: Path, n_products: int, n_looks: int, seed: int, n_scenes: int,
                         scene_seed: int) -> Path:
    """Draw ``n_scenes`` street looks of the demo shop's garments that the shop does not publish (look numbers
    from 100000 up, items chosen with ``scene_seed``), for training the demo detector: JPEGs under
    ``root/images/`` and their ground truth in ``root/annotations.json`` (see :func:`look_coco`). Deterministic
    in its arguments (the same bytes on every run). Returns the annotation file's path."""
    products, _ = plan(n_products, n_looks, seed)
    by_sku = {p.sku: p for p in products}
    rng = random.Random(scene_seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    looks = [DemoLook(number=100_000 + i, skus=_look_items(rng, products)) for i in range(n_scenes)]
    for look in looks:
        look_image(look, by_sku).save(root / "images" / f"scene-{look.number}.jpg", quality=90)
    coco = look_coco(looks, by_sku, lambda lk: f"scene-{lk.number}.jpg")
    (root / "annotations.json").write_text(json.dumps(coco, indent=1))
    return root / "annotations.json"


# ------------------------------------------------------------------------------------------------ the site


def _product_page(p: DemoProduct) -> str:
    imgs = [f"{{{{BASE}}}}/images/products/{p.slug}-{i}.jpg" for i in range(2)]
    desc = f"{p.title}. Made of {p.material}. Regular fit."
    ld = {
        "@context": "https://schema.org", "@type": "Product", "name": p.title, "sku": p.sku,
        "brand": {"@type": "Brand", "name": "Demo Atelier"}, "description": desc, "color": p.color,
        "material": p.material, "category": f"Women > {NOUNS[p.category].capitalize()}", "image": imgs,
        "offers": {"@type": "Offer", "price": f"{p.price:.2f}", "priceCurrency": "EUR",
                   "availability": "https://schema.org/InStock"},
    }
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(p.title)}</title>"
            f"<script type='application/ld+json'>{json.dumps(ld)}</script></head><body>"
            f"<h1>{html.escape(p.title)}</h1>" + "".join(f"<img src='{u}' alt=''>" for u in imgs)
            + "<a href='/'>home</a></body></html>")


DEMO_SIZES = ("S", "M")


def _model_page(family: list[DemoProduct]) -> str:
    """The page of a model sold in several colours: a schema.org ``ProductGroup`` (``productGroupID`` = the
    model) whose ``hasVariant`` lists one Product per colour and size (sku ``<colour sku>-<size>``, the colour, the
    size, the colour's own photos, an offer); sizes of one colour share its photos, so they are one item."""
    base = family[0]
    variants = []
    for v in family:
        imgs = [f"{{{{BASE}}}}/images/products/{v.slug}-{i}.jpg" for i in range(2)]
        for size in DEMO_SIZES:
            variants.append({"@type": "Product", "name": v.title, "sku": f"{v.sku}-{size}", "color": v.color,
                             "size": size, "image": imgs,
                             "offers": {"@type": "Offer", "price": f"{v.price:.2f}", "priceCurrency": "EUR",
                                        "availability": "https://schema.org/InStock"}})
    name = base.title.split(" ", 1)[1].capitalize()  # the model's name: the title without its colour
    ld = {"@context": "https://schema.org", "@type": "ProductGroup", "name": name, "productGroupID": base.group,
          "variesBy": ["https://schema.org/color", "https://schema.org/size"],
          "brand": {"@type": "Brand", "name": "Demo Atelier"}, "description": f"{name}. Made of {base.material}.",
          "material": base.material, "category": f"Women > {NOUNS[base.category].capitalize()}",
          "hasVariant": variants}
    imgs = "".join(f"<img src='{{{{BASE}}}}/images/products/{v.slug}-{i}.jpg' alt='{html.escape(v.title)}'>"
                   for v in family for i in range(2))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(name)}</title>"
            f"<script type='application/ld+json'>{json.dumps(ld)}</script></head><body>"
            f"<h1>{html.escape(name)}</h1>{imgs}<a href='/'>home</a></body></html>")


def _look_page(look: DemoLook, products: dict[str, DemoProduct]) -> str:
    links = "".join(f"<a class='look-product' href='/products/{products[s].slug}.html'>{html.escape(products[s].title)}</a>"
                    for s in look.skus)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Look {look.number}</title></head><body>"
            f"<div class='look'><img class='look-image' src='/images/looks/look-{look.number:03d}.jpg'>"
            f"{links}</div></body></html>")


def generate(root: Path, n_products: int = 48, n_looks: int = 12, seed: int = 7, colour_models: int = 3) -> dict:
    """Write the demo shop under ``root`` (idempotent: the same arguments write the same bytes).

    ``n_products`` garments are planned (``plan``); ``colour_models`` of them are sold in two or three colours
    (``colour_variants``: one page per model, a ``ProductGroup`` with each colour's own sku and photos, every
    colour in sizes S and M). Looks show planned products in their first colour.

    Returns the ground truth: ``{"products": {sku: {...}}, "looks": {n: {"skus": [...], "boxes": [...]}}}``
    (one product per colour; a colour of a model also has ``"group"``, a look-alike ``"look_alike_of"``), also written to
    ``root/ground_truth.json`` (not linked from the site).
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "products").mkdir(exist_ok=True)
    (root / "looks").mkdir(exist_ok=True)
    (root / "private").mkdir(exist_ok=True)
    (root / "images" / "products").mkdir(parents=True, exist_ok=True)
    (root / "images" / "looks").mkdir(parents=True, exist_ok=True)
    products, looks = plan(n_products, n_looks, seed)
    families = colour_variants(products, colour_models, seed)
    by_sku = {p.sku: p for p in products}
    items: list[DemoProduct] = []
    urls = []
    for p in products:
        family = families.get(p.sku, [p])
        page = _model_page(family) if len(family) > 1 else _product_page(p)
        (root / "products" / f"{p.slug}.html").write_text(page, encoding="utf-8")
        for v in family:
            packshot(v).save(root / "images" / "products" / f"{v.slug}-0.jpg", quality=90)
            alt_shot(v).save(root / "images" / "products" / f"{v.slug}-1.jpg", quality=90)
        items += family
        urls.append(f"/products/{p.slug}.html")
    for look in looks:
        look_image(look, by_sku).save(root / "images" / "looks" / f"look-{look.number:03d}.jpg", quality=90)
        (root / "looks" / f"look-{look.number:03d}.html").write_text(_look_page(look, by_sku), encoding="utf-8")
        urls.append(f"/looks/look-{look.number:03d}.html")
    # the looks' boxes beside their images, as COCO (not linked from any page)
    (root / "images" / "looks" / "boxes.coco.json").write_text(json.dumps(
        look_coco(looks, by_sku, lambda lk: f"look-{lk.number:03d}.jpg"), indent=1))
    (root / "private" / "staff-sale.html").write_text(
        "<html><body>robots.txt disallows this page; a polite crawler never fetches it.</body></html>")
    (root / "about.html").write_text("<html><body><h1>About the Demo Atelier</h1></body></html>")
    links = "".join(f"<a href='{u}'>{u}</a>\n" for u in urls)
    (root / "index.html").write_text(
        f"<html><body>{links}<a href='/about.html'>about</a><a href='/private/staff-sale.html'>staff</a></body></html>")
    (root / "robots.txt").write_text("User-agent: *\nDisallow: /private/\nSitemap: {{BASE}}/sitemap.xml\n")
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        + "".join(f"<url><loc>{{{{BASE}}}}{u}</loc></url>\n" for u in urls) + "</urlset>\n")
    truth = {
        "products": {p.sku: {"category": p.category, "title": p.title, **p.truth,
                             **({"group": p.group} if p.group else {}),
                             **({"look_alike_of": p.look_alike_of} if p.look_alike_of else {})} for p in items},
        "looks": {str(lk.number): {"skus": lk.skus, "boxes": lk.boxes} for lk in looks},
    }
    (root / "ground_truth.json").write_text(json.dumps(truth, indent=1))
    return truth


# --------------------------------------------------------------------------------- a legacy benchmark to leak into

FASHION200K_CATEGORY = {"dress": ("dress", "dresses"), "outerwear": ("jacket", "jackets"), "trousers": ("pants", "pants"),
                        "shorts": ("pants", "pants"), "skirt": ("skirt", "skirts"), "top": ("top", "tops"),
                        "shirt": ("top", "tops"), "sweater": ("top", "tops")}


def write_fashion200k(root: Path, n_products: int, n_looks: int, seed: int, n_items: int = 40,
                      n_leaks: int = 2, n_siblings: int = 6) -> dict:
    """Write a small legacy benchmark in Fashion200K's on-disk format under ``root``:
    ``labels/<category>_{train,test}_detect_all.txt`` (image path, detection score, description, tab-separated;
    every fourth item in the test split) and images under
    ``women/<category>/<subcategory>/<product_id>/<product_id>_0.jpeg``.

    ``n_items`` garments are drawn from a different seed (look-alike distractors); ``n_siblings`` of the demo
    shop's own garments are redrawn with another pattern (same shape, category and colour: soft negatives for
    the noise gallery); and the alternative shots (the query images) of the demo shop's first ``n_leaks``
    garments are copied in, resized and re-encoded: a leak the contamination check must find.
    Returns ``{"leaked_skus": [...], "sibling_skus": [...], "items": n}``.
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed + 200_000)
    own, _ = plan(n_products, n_looks, seed)
    others, _ = plan(n_items, 0, seed + 1)
    lines: dict[str, list[str]] = {}
    leaked = []

    def put(img: Image.Image, cat: str, desc: str, pid: int) -> None:
        top, sub = FASHION200K_CATEGORY[cat]
        rel = f"women/{sub}/{sub}_{cat}/{pid}/{pid}_0.jpeg"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        img.save(root / rel, quality=80)
        lines.setdefault(top, []).append(f"{rel}\t{rng.uniform(0.8, 1.0):.4f}\t{desc}")

    pid = 91_000_000
    for p in others:
        if p.category in FASHION200K_CATEGORY:
            put(packshot(p), p.category, p.title.lower(), pid)
            pid += 1
    mapped = [p for p in own if p.category in FASHION200K_CATEGORY]
    siblings = []
    for p in mapped[n_leaks : n_leaks + n_siblings]:
        sib = DemoProduct(**{**p.__dict__, "sku": p.sku + "-SIB",
                             "pattern": PATTERNS[(PATTERNS.index(p.pattern) + 1) % len(PATTERNS)]})
        put(packshot(sib), sib.category, sib.title.lower(), pid)
        siblings.append(p.sku)
        pid += 1
    for p in mapped[:n_leaks]:
        im = alt_shot(p)
        put(im.resize((im.width * 9 // 10, im.height * 9 // 10), Image.Resampling.LANCZOS), p.category,
            p.title.lower(), pid)
        leaked.append(p.sku)
        pid += 1
    (root / "labels").mkdir(exist_ok=True)
    for top, ls in lines.items():
        for split, part in (("train", [x for i, x in enumerate(ls) if i % 4 != 3]),
                            ("test", [x for i, x in enumerate(ls) if i % 4 == 3])):
            if part:
                (root / "labels" / f"{top}_{split}_detect_all.txt").write_text("\n".join(part) + "\n",
                                                                               encoding="utf-8")
    return {"leaked_skus": leaked, "sibling_skus": siblings, "items": pid - 91_000_000}


def write_js_pages(root: Path, n: int) -> None:
    """A site whose product data exists only after JavaScript runs: each of ``n`` pages builds its schema.org
    JSON-LD and its image in the browser. A crawler that does not render finds nothing."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "js").mkdir(exist_ok=True)
    urls = []
    for i in range(n):
        data = json.dumps({"name": f"Rendered {COLORS_LIST[i % len(COLORS_LIST)]} dress {i}", "sku": f"JS-{i:05d}",
                           "price": f"{10 + i % 90}.00"})
        (root / "js" / f"p-{i:05d}.html").write_text(
            "<!doctype html><html><head><meta charset='utf-8'><title>loading</title></head><body>"
            "<div id='app'>loading…</div><script>"
            f"const d = {data};"
            "const ld = {'@context': 'https://schema.org', '@type': 'Product', name: d.name, sku: d.sku,"
            " image: ['/img/' + d.sku + '.jpg'], offers: {'@type': 'Offer', price: d.price, priceCurrency: 'EUR'}};"
            "const s = document.createElement('script'); s.type = 'application/ld+json';"
            "s.text = JSON.stringify(ld); document.head.appendChild(s);"
            "document.getElementById('app').textContent = d.name;"
            "</script></body></html>", encoding="utf-8")
        urls.append(f"/js/p-{i:05d}.html")
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        + "".join(f"<url><loc>{{{{BASE}}}}{u}</loc></url>\n" for u in urls) + "</urlset>\n")


COLORS_LIST = list(COLORS)
