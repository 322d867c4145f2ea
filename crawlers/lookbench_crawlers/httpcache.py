"""HTTP cache policy for incremental crawls: every cached page is revalidated with a conditional request
(``If-None-Match`` / ``If-Modified-Since`` from its ETag / Last-Modified); a ``304`` reuses the stored copy.
RFC 2616's heuristic freshness would otherwise skip the request entirely and miss changes."""

from scrapy.extensions.httpcache import RFC2616Policy


class RevalidateAlwaysPolicy(RFC2616Policy):
    def is_cached_response_fresh(self, cachedresponse, request):
        self._set_conditional_validators(request, cachedresponse)
        return False
