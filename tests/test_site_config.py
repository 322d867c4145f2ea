"""A site file's values are checked when it is loaded, as a user's build loads it (SiteConfig.from_yaml, load_config,
``lookbench build --config``): a bad start or sitemap URL, egress allowance or public origin, a replay site without
its pages or anything to crawl, a key given twice; the message names the file, the field and the bad value."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.config import ConfigError, SiteConfig, load_config
from lookbench_pipeline.config.base import _read_yaml
from lookbench_pipeline.egress import EgressPolicy

ROOT = Path(__file__).resolve().parents[1]


def _site(tmp_path, **fields) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", **fields}))
    return p


def _pipeline(tmp_path, site: Path) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), "sites": [site.name]}))
    return p


def _replay(tmp_path, **fields) -> Path:
    (tmp_path / "pages").mkdir(exist_ok=True)
    return _site(tmp_path, kind="replay", pages_dir="pages", allow_private_addresses=True, **fields)


@pytest.mark.parametrize("kind", ["web", "demo", "replay"])
@pytest.mark.parametrize("field", ["start_urls", "sitemap_urls"])
@pytest.mark.parametrize("url,why", [
    ("file:///etc/passwd", "scheme 'file:' is not http or https"),
    ("FILE:///etc/passwd", "scheme 'file:' is not http or https"),
    ("javascript:alert(1)", "scheme 'javascript:' is not http or https"),
    ("ftp://shop.example/", "scheme 'ftp:' is not http or https"),
    ("shop/index.html", "not an absolute URL (no http:// or https://)"),
    ("/sitemap.xml", "not an absolute URL (no http:// or https://)"),
    ("https:///sitemap.xml", "no host"),
    ("http://shop.example:99999/", "not a valid URL (Port out of range 0-65535)"),
    ("{{BASE}}.evil.example/", "{{BASE}} may only begin a URL"),
    ("file://{{BASE}}/", "{{BASE}} may only begin a URL"),
    ("http://sh op.example/", "it holds white space or a control character"),
    ("http://shop.example:0/", "its port is empty or 0"),
    ("http://shop.example:/", "its port is empty or 0"),
    ("http://user:pw@shop.example/", "it has a user name"),
    ("https://bücher.example/",
     "host 'bücher.example' is not ASCII: write it in its IDNA form (xn--bcher-kva.example)"),
    ("http://[::1]:8080/", "an IPv6 literal host is not supported"),
])
def test_a_start_or_sitemap_url_is_http_for_every_kind(tmp_path, kind, field, url, why):
    """``file:///etc/passwd`` made the crawler read a local file into the crawl's WARC; a relative path or
    ``javascript:`` crawled nothing. Refused for every kind: a demo or replay site may only add {{BASE}} paths."""
    other = "sitemap_urls" if field == "start_urls" else "start_urls"
    extra = {"pages_dir": "pages"} if kind == "replay" else {}
    (tmp_path / "pages").mkdir()
    p = _site(tmp_path, kind=kind, **{field: ["https://shop.example/", url], other: ["https://shop.example/"]},
              **extra)
    with pytest.raises(ConfigError) as err:
        SiteConfig.from_yaml(p)
    assert re.fullmatch(re.escape(f"{p}: {field}[1]: {why}") + ".*" + re.escape(f"(got '{url}')"),
                        str(err.value)), str(err.value)


def test_valid_urls_load(tmp_path):
    site = SiteConfig.from_yaml(_site(tmp_path, start_urls=["https://shop.example/", "HTTP://Shop.Example:8080/a?b#c"],
                                      sitemap_urls=["https://shop.example/sitemap.xml"],
                                      allowed_ports=[80, 443, 8080]))  # a port the site does not allow: an error
    assert site.start_urls[1] == "HTTP://Shop.Example:8080/a?b#c", "kept as written"
    replay = SiteConfig.from_yaml(_replay(tmp_path, start_urls=["{{BASE}}", "{{BASE}}/"],
                                          sitemap_urls=["{{BASE}}/sitemap.xml"]))
    assert replay.sitemap_urls == ["{{BASE}}/sitemap.xml"]


def test_a_web_site_in_a_build_has_no_local_server(tmp_path):
    """The spider run on its own replaces {{BASE}} by its base_url argument (the tests serve web sites so); a build
    serves no web site, so there {{BASE}} would crawl nothing."""
    site = _site(tmp_path, start_urls=["https://shop.example/"], sitemap_urls=["{{BASE}}/sitemap.xml"])
    assert SiteConfig.from_yaml(site).sitemap_urls == ["{{BASE}}/sitemap.xml"]
    cfg = _pipeline(tmp_path, site)
    with pytest.raises(ConfigError, match=rf"^{cfg}: web site 's': '\{{\{{BASE\}}\}}/sitemap.xml' begins with "):
        load_config(cfg)


def test_a_replay_site_names_its_pages_and_what_to_crawl(tmp_path):
    p = _site(tmp_path, kind="replay", sitemap_urls=["{{BASE}}/sitemap.xml"])
    with pytest.raises(ConfigError) as err:
        SiteConfig.from_yaml(p)
    assert str(err.value) == (f"{p}: replay site 's' needs pages_dir: the folder of its saved *.html pages "
                              "(relative to the site file)")
    for kind in ("replay", "demo"):
        p = _site(tmp_path, kind=kind, pages_dir=str(tmp_path), allow_private_addresses=True)
        with pytest.raises(ConfigError, match=rf"^{p}: {kind} site 's' names no start_urls or sitemap_urls, so its "
                                              r"crawl would fetch nothing: add sitemap_urls: \['\{\{BASE\}\}/"
                                              r"sitemap\.xml'\]"):
            load_config(_pipeline(tmp_path, p))
    p = _replay(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"])
    (tmp_path / "pages").rmdir()
    with pytest.raises(ConfigError) as err:
        load_config(_pipeline(tmp_path, p))
    assert str(err.value) == f"{tmp_path / 'c.yaml'}: replay site 's': pages_dir {tmp_path / 'pages'} is not a folder"


@pytest.mark.parametrize("entry,why", [
    ("not-an-address", "is not an IP address with an optional port"),
    ("0.0.0.0/0", "is not an IP address with an optional port"),
    ("::/0", "is not an IP address with an optional port"),
    ("10.0.0.0/8", "is not an IP address with an optional port"),
    ("test-host.internal:8080", "is not an IP address with an optional port"),
    ("10.1.2.3:http", "is not an IP address with an optional port"),
    ("10.1.2.3:0", "port 0 is not between 1 and 65535"),
    ("10.1.2.3:70000", "port 70000 is not between 1 and 65535"),
    ("0.0.0.0", "is the unspecified address"),
    ("[::]:8080", "is the unspecified address"),
    ("::ffff:0.0.0.0", "is the unspecified address"),
    ("10.1.2.3:", "is not an IP address with an optional port"),
    ("[::1]junk", "is not an IP address with an optional port"),
])
def test_allowed_addresses_are_exact_addresses(tmp_path, entry, why):
    """An entry the egress policy cannot parse failed with a traceback deep in Scrapy; it is refused at load, by
    the policy's own parser. A network is no exact address (the list allows named test hosts, no range)."""
    p = _site(tmp_path, start_urls=["https://shop.example/"], allowed_addresses=["10.1.2.3:8080", entry])
    with pytest.raises(ConfigError, match="^" + re.escape(f"{p}: allowed_addresses[1]: '{entry}'")
                       + f"[: ].*{why}"):
        SiteConfig.from_yaml(p)


def test_valid_allowed_addresses_load_and_mean_what_the_crawl_allows(tmp_path):
    entries = ["10.1.2.3:8080", "[fd00::5]:8080", "192.168.1.4", " 127.0.0.1:9000"]
    site = SiteConfig.from_yaml(_site(tmp_path, start_urls=["https://shop.example/"], allowed_addresses=entries))
    policy = EgressPolicy.from_strings(site.allowed_ports, site.allowed_addresses)
    assert policy.refusal("10.1.2.3", 8080) is None and policy.refusal("10.1.2.3", 8081) == "address_not_global"
    assert policy.refusal("fd00::5", 8080) is None and policy.refusal("192.168.1.4", 22) is None


@pytest.mark.parametrize("origin,why", [
    ("javascript:alert(1)//", "scheme 'javascript:' is not http or https"),
    ("file:///tmp", "scheme 'file:' is not http or https"),
    ("shop.example", r"not an absolute URL \(no http:// or https://\)"),
    ("https://", "no host"),
    ("https://shop.example/pages", "it has a path, query or fragment"),
    ("https://shop.example/?x=1", "it has a path, query or fragment"),
    ("https://shop.example#top", "it has a path, query or fragment"),
    ("https://user@shop.example", "it has a user name"),
])
def test_public_origin_is_an_http_origin(tmp_path, origin, why):
    """Recorded URLs were ``javascript:alert(1)/pages/...``: public_origin replaces the local server's origin."""
    (tmp_path / "pages").mkdir()
    p = _replay(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"], public_origin=origin)
    with pytest.raises(ConfigError, match=rf"^{p}: public_origin: {why}: public_origin is an http\(s\) "
                                          "origin"):
        SiteConfig.from_yaml(p)


def test_valid_public_origins_load(tmp_path):
    for origin, recorded in (("https://shop.example", "https://shop.example"),
                             ("https://shop.example/", "https://shop.example"),
                             ("http://shop.example:8443", "http://shop.example:8443")):
        p = _replay(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"], public_origin=origin)
        assert SiteConfig.from_yaml(p).recorded_origin == recorded


def test_errors_read_without_pydantic_noise(tmp_path):
    """A site file's error names the site file (not the pipeline file that lists it, then ``(top level): Value
    error,``); a model-level check of the pipeline file reads as its message alone."""
    site = _site(tmp_path, max_pages=0)
    with pytest.raises(ConfigError) as err:
        load_config(_pipeline(tmp_path, site))
    assert str(err.value).startswith(f"{site}: max_pages: Input should be greater than or equal to 1"), err.value
    site = _site(tmp_path, kind="replay", pages_dir="gone", sitemap_urls=["{{BASE}}/sitemap.xml"])
    with pytest.raises(ConfigError) as err:
        load_config(_pipeline(tmp_path, site))
    assert str(err.value) == f"{tmp_path / 'c.yaml'}: replay site 's': pages_dir {tmp_path / 'gone'} is not a folder"


def test_a_key_given_twice_is_a_yaml_error(tmp_path):
    """PyYAML keeps the last of two equal keys without a word: ``name:`` twice crawled under the second name."""
    p = tmp_path / "s.yaml"
    p.write_text("name: first\nstart_urls: ['https://shop.example/']\nname: second\n")
    with pytest.raises(ConfigError, match=rf"(?s)^{p}: not valid YAML: .*key 'name' given twice \(first on line 1\)"
                                          rf".*s\.yaml\", line 3, column 1"):
        SiteConfig.from_yaml(p)
    c = tmp_path / "c.yaml"
    c.write_text("data_dir: data\nimages:\n  min_side_px: 40\n  min_side_px: 50\n")
    with pytest.raises(ConfigError, match=r"(?s)c\.yaml: not valid YAML: .*key 'min_side_px' given twice.*line 4"):
        load_config(c)
    c.write_text("data_dir: data\nimages: {1: a, '1': b}\n")  # an int and a string key differ: not twice
    with pytest.raises(ConfigError, match=r"images\[1\]: Keys should be strings"):  # (pydantic refuses the int)
        load_config(c)


def test_a_merge_may_override_keys(tmp_path):
    """``<<: *anchor`` brings in keys that the mapping may override: that is no key given twice."""
    p = tmp_path / "m.yaml"
    p.write_text("base: &b {x: 1, y: 2}\nmore: &m {<<: *b, z: 3}\none:\n  <<: *b\n  x: 5\n"
                 "two:\n  <<: [*m, *b]\n  y: 6\n")
    assert _read_yaml(p) == {"base": {"x": 1, "y": 2}, "more": {"x": 1, "y": 2, "z": 3}, "one": {"x": 5, "y": 2},
                             "two": {"x": 1, "y": 6, "z": 3}}


def test_shipped_yaml_has_no_key_twice_and_shipped_sites_load():
    files = [f for folder in ("configs", "lookbench_pipeline/data", "tests") for pattern in ("*.yaml", "*.yml")
             for f in (ROOT / folder).rglob(pattern)]
    assert len(files) >= 7
    for f in files:
        _read_yaml(f)
    for f in [*(ROOT / "configs/sites").glob("*.yaml"), *(ROOT / "lookbench_pipeline/data/sites").glob("*.yaml")]:
        SiteConfig.from_yaml(f)
    for f in (ROOT / "configs").glob("*.yaml"):
        assert load_config(f).sites


def test_the_cli_reports_a_bad_site_file_before_any_run(tmp_path):
    """What the fresh-user trial ran: ``lookbench build --config`` with a site whose start URL is a local file.
    Exit 2, one line naming the site file, the field and the value; no traceback, nothing crawled."""
    site = _site(tmp_path, start_urls=["file:///etc/passwd"])
    cfg = _pipeline(tmp_path, site)
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(cfg)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"configuration error: {site}: start_urls[0]: scheme 'file:' is "
                                  "not http or https"), proc.stderr
    assert "(got 'file:///etc/passwd')" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists(), "nothing ran"


def test_the_cli_reports_a_model_level_error_without_pydantic_noise(tmp_path, capsys):
    from lookbench_pipeline.cli.main import main

    site = _site(tmp_path, kind="replay", start_urls=["{{BASE}}/"])
    assert main(["build", "--config", str(_pipeline(tmp_path, site))]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"configuration error: {site}: replay site 's' needs pages_dir: the folder of its saved "
                           "*.html pages (relative to the site file)"), err


def test_a_number_is_not_true_or_false_and_a_name_fits_a_file_name(tmp_path):
    """`max_pages: true` would be read as 1 by pydantic (the crawl stopped after one page): an error; a site name
    longer than a file name can be is an error at load, not an OSError when the crawl makes its folder."""
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nmax_pages: true\n")
    with pytest.raises(ConfigError, match=r"max_pages: true is not a number"):
        SiteConfig.from_yaml(p)
    p.write_text(f"name: {'a' * 300}\n")
    with pytest.raises(ConfigError, match=r"name: 'a+'… is 300 bytes long: .* at most 100 bytes"):
        SiteConfig.from_yaml(p)
    p.write_text("name: s\nmax_pages: 3\nfollow_links: true\n")
    assert SiteConfig.from_yaml(p).max_pages == 3


def test_a_list_of_numbers_holds_no_true_or_false(tmp_path):
    """`allowed_ports: [true]` was read as port 1 (the bool check covered number fields, not lists of numbers):
    an error naming the item; a band of two numbers in the pipeline file likewise."""
    from lookbench_pipeline.config import load_config

    p = tmp_path / "s.yaml"
    p.write_text("name: s\nallowed_ports: [443, true]\n")
    with pytest.raises(ConfigError, match=r"allowed_ports: item 2: true is not a number"):
        SiteConfig.from_yaml(p)
    p.write_text("name: s\nallowed_ports: [443, 8443]\n")
    assert SiteConfig.from_yaml(p).allowed_ports == [443, 8443]
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text("negatives:\n  band: [false, 0.9]\n")
    with pytest.raises(ConfigError, match=r"band: item 1: false is not a number"):
        load_config(cfg)


@pytest.mark.parametrize("field", ["allowed_hosts", "image_hosts", "render_hosts"])
@pytest.mark.parametrize("entry,why", [
    ("*", "a wildcard is not a host"),
    ("https://shop.example/x", "not a host"),
    ("", "not a host"),
    ("shop.example:0", "its port is empty or 0"),
    ("bücher.example", "is not ASCII: write it in its IDNA form"),
])
def test_host_entries_are_hosts(tmp_path, field, entry, why):
    """An entry the crawler could never match (a wildcard, a URL, an empty string) loaded silently and allowed
    nothing; each is now a configuration error naming it. A host with a port, an IPv4 address and upper case load
    (as the lower-case host the crawler compares)."""
    p = _site(tmp_path, **{field: [entry]})
    with pytest.raises(ConfigError, match=re.escape(why)):
        SiteConfig.from_yaml(p)
    p = _site(tmp_path, **{field: ["Shop.Example", "cdn.shop.example:8443", "10.1.2.3"]})
    assert getattr(SiteConfig.from_yaml(p), field) == ["shop.example", "cdn.shop.example:8443", "10.1.2.3"]


def test_a_start_or_sitemap_url_on_a_port_the_site_does_not_allow_is_a_configuration_error(tmp_path, capsys):
    """``start_urls: [http://shop-b.example/listing.html]`` with ``allowed_ports: [18731]``: the crawl could only
    refuse it (port_not_allowed), so the build stops before any run, naming the field and the port; the same for a
    sitemap. A {{BASE}} URL (its port is the local server's), a port of an allowed_addresses pair, and with
    allow_private_addresses an IP literal or localhost (their own pairs are allowed) are no error."""
    from lookbench_pipeline.cli.main import main

    site = _site(tmp_path, start_urls=["http://shop-b.example/listing.html"], allowed_ports=[18731])
    assert main(["build", "--config", str(_pipeline(tmp_path, site))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"configuration error: {site}: start_urls[0] 'http://shop-b.example/listing.html': "
                          "port 80 is not in allowed_ports [18731]"), err
    assert "Traceback" not in err and not (tmp_path / "data").exists()
    site = _site(tmp_path, sitemap_urls=["https://shop-b.example:18731/s.xml", "https://shop-b.example/s.xml"],
                 allowed_ports=[18731])
    with pytest.raises(ConfigError, match=r"sitemap_urls\[1\] .*port 443 is not in allowed_ports \[18731\]"):
        SiteConfig.from_yaml(site)
    with pytest.raises(ConfigError, match=r"start_urls\[0\] .*port 8080 is not in allowed_ports \[80, 443\]"):
        SiteConfig.from_yaml(_site(tmp_path, start_urls=["http://shop-b.example:8080/"]))
    for ok in ({"start_urls": ["http://shop-b.example:8080/"], "allowed_addresses": ["10.1.2.3:8080"]},
               {"start_urls": ["http://10.1.2.3:8080/"], "allowed_addresses": ["10.1.2.3"]},
               {"start_urls": ["http://127.0.0.1:8123/", "http://localhost:8124/"], "allow_private_addresses": True},
               {"kind": "demo", "start_urls": ["{{BASE}}/"], "allowed_ports": [18731]},
               {"start_urls": ["https://shop-b.example/"]}):
        SiteConfig.from_yaml(_site(tmp_path, **ok))
