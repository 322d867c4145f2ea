"""The Scrapy project: spiders that only crawl, and item pipelines that stamp and validate what they yield."""
