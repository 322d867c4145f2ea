"""What the spider yields. Every item has ``kind`` (product | look | page) so one feed carries all three."""

import scrapy


class ProductItem(scrapy.Item):
    kind = scrapy.Field()
    site = scrapy.Field()
    url = scrapy.Field()
    title = scrapy.Field()
    description = scrapy.Field()
    brand = scrapy.Field()
    sku = scrapy.Field()  # the shop's reference as the page states it (may be the model's, shared by its colours)
    variant_id = scrapy.Field()  # the item's own id at colour granularity: the basis of its product_id
    price = scrapy.Field()
    currency = scrapy.Field()
    color = scrapy.Field()
    material = scrapy.Field()
    category_text = scrapy.Field()
    image_urls = scrapy.Field()
    extracted_from = scrapy.Field()
    availability = scrapy.Field()  # schema.org ItemAvailability short name (InStock, OutOfStock…) or None
    group_id = scrapy.Field()  # the model a colour variant belongs to (schema.org ProductGroup id)
    field_sources = scrapy.Field()  # [{name: field, value: source}]
    facets = scrapy.Field()  # the shop's attribute facets, schema.org additionalProperty: [{name, value}]
    images_refused = scrapy.Field()  # the page's opt-out that forbids keeping its images (robots_noimageindex)
    images = scrapy.Field()  # [{url, path, reason}] filled by ImageDownloadPipeline
    # The item's place among the products its page yielded, in the page's order (0: the page's default, e.g. the
    # first colour of a ProductGroup). Items reach the feed in the order their image downloads finish, so the
    # feed's order is not the page's; a look that links a page of several colours is resolved by this.
    page_position = scrapy.Field()
    from_page = scrapy.Field()  # the page that listed it, where that is not its own url (Shopify's products.json)
    crawled_at = scrapy.Field()


class LookItem(scrapy.Item):
    kind = scrapy.Field()
    site = scrapy.Field()
    url = scrapy.Field()
    image_url = scrapy.Field()
    product_urls = scrapy.Field()
    images_refused = scrapy.Field()
    images = scrapy.Field()
    crawled_at = scrapy.Field()


class PageItem(scrapy.Item):
    """One fetched (or refused) page and its outcome: the crawl log."""

    kind = scrapy.Field()
    site = scrapy.Field()
    url = scrapy.Field()
    status = scrapy.Field()
    outcome = scrapy.Field()
    reason = scrapy.Field()
    n_items = scrapy.Field()  # products + looks the page yielded (resume bookkeeping)
    from_page = scrapy.Field()  # a refused sub-resource's row: the rendered page that requested it
    redirect_to = scrapy.Field()  # a "redirected" row: where the redirect led (that page has its own row); a
    # refused redirect's row (redirect:<why>): its Location
    crawled_at = scrapy.Field()
