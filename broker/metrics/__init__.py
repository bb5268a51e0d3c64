"""The broker's Prometheus metrics under Pulsar's names (:mod:`.broker_metrics`) and their text exposition,
rendered a little at a time so a scrape never holds the event loop (:mod:`.exposition`). Other parts (the
owner proxy, the composition root's storage figures) add their families as metrics sources."""
