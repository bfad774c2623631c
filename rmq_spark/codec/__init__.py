"""Pure codecs: bytes in, values out (and back). No files, sockets or protocol stubs here."""
