"""The real-engine tier: llama.cpp's ``llama-server``, built here from the package registry's
source (``prepare.py``), serving tiny llama-architecture models made by ``models.py``, swept by
``orchestrator run`` on the real-systemd test bed (``tests/realhost/``)."""
