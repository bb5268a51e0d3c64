"""Wire formats that clients need too: message ids, topic names, the entry format, the ``magnetar.v1``
frame codec and Pulsar's date format. Nothing here imports the server: the admin command line, the Spark
source and the perf tools import these without it."""
