"""Pulsar's binary protocol (the official clients' ``pulsar://`` port): the sans-IO codec - the protobuf wire
format (:mod:`.protobuf`), the commands (:mod:`.commands`) and the frames (:mod:`.framing`) - and the
adapter that turns a connection's commands into the core's publish requests, permits, deliveries and acks
(:mod:`.connection`). ``docs/binary-protocol.md`` says what is served and what is refused."""
