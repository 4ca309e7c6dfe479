"""Built-in workloads: realistic request sets built offline from the running interpreter.

An operator without a traffic sample still wants prompts that read like traffic, not filler
words. Every Python installation carries a large body of real text: its standard library's
source (code, docstrings, signatures) and, in ``pydoc_data``, the language reference that
``help()`` shows. The sets are built from those, deterministically (sorted paths, choices by
a hash of the path or name, no clock, no randomness), so nothing is downloaded or shipped as
data, and the same interpreter always gives the same set; the sample's ``content_hash``
(of the JSONL built here) tells two interpreters' sets apart.

- ``code-context``: one request per standard-library module (those of 3 KB and more, outside
  tests and codec tables): a question about a named function or class of the module, then
  the module's full source in a fenced block. The question comes first so that a cell
  shorter than the module keeps it when the source is trimmed. The largest modules
  (``_pydecimal``, ``typing``, ``argparse``, ...) run past 32k tokens.
- ``codegen``: "write this function" tasks from public standard-library functions that carry
  a docstring: the signature and the docstring's summary, phrased as a developer asks for
  code (type hints, tests, edge cases), in several phrasings.
- ``chat``: multi-turn conversations with an assistant for developers: a question about a
  language topic or a module, the answer taken from the reference text or the module's
  docstring, and one or two follow-ups; some open with a system prompt.

No built-in request carries ``output_tokens``: these answers were never generated, so there
is no real length to give; ``output_lengths: workload`` uses ``max_tokens`` for them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.bench.workloads.sample import WorkloadSample, parse_sample

BUILTIN_WORKLOADS: tuple[str, ...] = ("code-context", "codegen", "chat")

_SKIPPED_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "encodings",
                  "__pycache__", "lib2to3", "turtledemo"}
_MIN_MODULE_BYTES = 3000
_CODEGEN_LIMIT = 320
_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

_DEF = re.compile(r"^(?:async )?def ([A-Za-z]\w*)\(", re.MULTILINE)
_CLASS = re.compile(r"^class ([A-Za-z]\w*)", re.MULTILINE)
_METHOD = re.compile(r"^    (?:async )?def ([a-z]\w*)\(", re.MULTILINE)
_DOCUMENTED_DEF = re.compile(
    r'^def ([a-z]\w*)\(([^)]*)\)(\s*->\s*[^:\n]+)?:\n[ \t]+[rRuU]?"""\s*(.+?)(?:\n\s*\n|""")',
    re.MULTILINE | re.DOTALL,
)

_MODULE_DOC = re.compile(r'(?:[ \t]*(?:#[^\n]*)?\n)*[rRuU]?"""(.+?)"""', re.DOTALL)

_FUNCTION_QUESTIONS = (
    "Explain what `{name}` does, step by step, and point out the edge cases it handles.",
    "Is there any input for which `{name}` behaves surprisingly or raises? Walk me through it.",
    "Write pytest unit tests for `{name}` that cover its main paths and its error handling.",
    "Refactor `{name}` to be easier to read without changing its behaviour, and explain each "
    "change.",
    "Add type hints to `{name}` and explain the types you chose for each parameter.",
    "What is the time complexity of `{name}`, and where would it be slow on large inputs?",
    "I want to call `{name}` from my own code. Which arguments matter, and what does it "
    "return?",
    "Could `{name}` be a problem if several threads call it at once? Explain why or why not.",
)
_CLASS_QUESTIONS = (
    "How would I use `{name}` in my own code? Show a short example and explain the main "
    "methods.",
    "Summarise the responsibilities of the class `{name}` and how its methods work together.",
    "I want to subclass `{name}` to change its behaviour. Which methods should I override, "
    "and what do I have to keep consistent?",
    "Draw up a short design review of `{name}`: what is good about it and what you would "
    "change.",
)
_MODULE_QUESTIONS = (
    "Summarise the public API of this module and what each part is for.",
    "Which parts of this module would you test first, and why? Sketch the tests.",
)
_CODEGEN_TASKS = (
    "Write a Python function `{sig}` that does the following: {doc} Include type hints and a "
    "docstring, and answer with the code in a ```python block.",
    "Implement `{sig}` in Python from scratch, without importing `{module}`. What it should "
    "do: {doc} Add two or three doctest examples to the docstring.",
    "I need a helper `{sig}`. {doc} Please write it, then write three pytest tests for it.",
    "Can you write this function for me?\n\n```python\ndef {sig}:\n    \"\"\"{doc}\"\"\"\n```"
    "\n\nFill in the body, handle invalid input sensibly, and explain any edge cases.",
    "Write `{sig}` in idiomatic, modern Python (3.10+). Requirements: {doc} Keep it short and "
    "readable; no external packages.",
)
_SYSTEM_PROMPTS = (
    "You are a helpful assistant for software developers. Answer precisely and show code "
    "where it helps.",
    "You are a senior Python engineer mentoring a colleague. Be concise and practical.",
    "You are a documentation assistant. Explain things clearly for someone new to Python.",
)
_TOPIC_OPENERS = (
    "Can you explain {title} in Python? I keep getting it slightly wrong.",
    "What are the exact rules for {title}? I'd like the precise version, not a tutorial.",
    "Quick question: how does {title} work in Python?",
)
_MODULE_OPENERS = (
    "What is the `{module}` module for, and when should I reach for it?",
    "I found `import {module}` in some code I'm reading. What does that module do?",
)
_FOLLOW_UPS = (
    "Thanks. Can you give me a short, realistic example of that in practice?",
    "What are the most common mistakes people make with this?",
    "Could you summarise that in three bullet points?",
    "How does this interact with exceptions? Anything I should watch out for?",
    "Is there a performance cost to this that I should know about?",
    "Ok, and how would I write a unit test that checks I'm using it correctly?",
)
_SECOND_FOLLOW_UPS = (
    "Great, that helps. One more thing: is this different in older Python versions?",
    "Makes sense. Can you rewrite your example so that it is fully type-annotated?",
    "And if I wanted to explain this to a junior colleague in two sentences?",
)


@dataclass(frozen=True, slots=True)
class _Module:
    """One standard-library source file: its path below the stdlib directory and its text."""

    relpath: str
    text: str

    @property
    def dotted(self) -> str:
        name = self.relpath.removesuffix(".py").replace("/", ".")
        return name.removesuffix(".__init__")


def load_builtin(name: str) -> WorkloadSample:
    """The built-in set ``name`` (one of ``BUILTIN_WORKLOADS``), parsed like a sample file."""
    builders: dict[str, Callable[[], Iterator[list[dict[str, str]]]]] = {
        "code-context": _code_context,
        "codegen": _codegen,
        "chat": _chat,
    }
    if name not in builders:
        raise ValueError(f"no built-in workload {name!r}; known: {', '.join(BUILTIN_WORKLOADS)}")
    return _parsed(name, builders[name])


@functools.lru_cache(maxsize=len(BUILTIN_WORKLOADS))
def _parsed(name: str, build: Callable[[], Iterator[list[dict[str, str]]]]) -> WorkloadSample:
    lines = dict.fromkeys(json.dumps({"messages": m}) + "\n" for m in build())  # distinct
    text = "".join(lines)
    return parse_sample(text, filename=f"builtin:{name}", label=f"builtin:{name}")


def stdlib_dir() -> Path:
    """The running interpreter's standard-library directory (pure Python modules)."""
    return Path(sysconfig.get_paths()["stdlib"])


@functools.lru_cache(maxsize=1)
def _modules() -> tuple[_Module, ...]:
    root = stdlib_dir()
    paths: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in _SKIPPED_PARTS and not d.startswith("config-")]
        paths += [Path(directory, f) for f in files if f.endswith(".py")]
    found: list[_Module] = []
    for path in sorted(paths):
        rel = path.relative_to(root)
        try:
            if path.stat().st_size < _MIN_MODULE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        found.append(_Module(rel.as_posix(), text))
    return tuple(found)


def _pick(key: str, options: Sequence[str]) -> str:
    """A deterministic choice among ``options`` by a hash of ``key``."""
    digest = hashlib.sha256(key.encode()).digest()
    return options[int.from_bytes(digest[:4], "big") % len(options)]


def _code_context() -> Iterator[list[dict[str, str]]]:
    for module in _modules():
        functions = [n for n in _DEF.findall(module.text) if not n.startswith("_")]
        classes = [n for n in _CLASS.findall(module.text) if not n.startswith("_")]
        methods = [n for n in _METHOD.findall(module.text) if not n.startswith("_")]
        if classes and (not functions or _pick(module.relpath + "#kind", "ab") == "a"):
            template = _pick(module.relpath, _CLASS_QUESTIONS)
            question = template.format(name=_pick(module.relpath + "#name", classes))
        elif functions or methods:
            template = _pick(module.relpath, _FUNCTION_QUESTIONS)
            question = template.format(name=_pick(module.relpath + "#name", functions or methods))
        else:
            question = _pick(module.relpath, _MODULE_QUESTIONS)
        content = (
            f"{question}\n\nThis is `{module.relpath}` from the Python {_PYTHON} standard "
            f"library:\n\n```python\n{module.text.rstrip()}\n```"
        )
        yield [{"role": "user", "content": content}]


def _summary(docstring: str) -> str:
    """A docstring's first paragraph on one line, ending in a full stop."""
    text = " ".join(docstring.split())
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith((".", "?", "!")) else text + "."


def _codegen() -> Iterator[list[dict[str, str]]]:
    seen: set[str] = set()
    tasks: list[tuple[str, str, str]] = []
    for module in _modules():
        for name, args, ret, doc in _DOCUMENTED_DEF.findall(module.text):
            args = " ".join(args.split())
            summary = _summary(doc.strip())
            if name in seen or len(summary) < 25 or len(args) > 120 or "self" in args:
                continue
            seen.add(name)
            sig = f"{name}({args}){' '.join(ret.split()) if ret else ''}"
            tasks.append((module.dotted, sig, summary))
    for module_name, sig, summary in tasks[:_CODEGEN_LIMIT]:
        template = _pick(sig, _CODEGEN_TASKS)
        yield [{"role": "user", "content": template.format(
            sig=sig, doc=summary, module=module_name.split(".")[0])}]


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs of reference text, unwrapped; indented blocks (grammar, examples)
    kept as they are."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        if not block.strip() or set(block.strip()) <= set("*=-"):
            continue
        out.append(block if block.startswith("   ") else " ".join(block.split()))
    return out


def _answer(paragraphs: list[str], limit: int) -> tuple[str, list[str]]:
    """The first paragraphs up to about ``limit`` characters, and the rest."""
    taken: list[str] = []
    size = 0
    for i, paragraph in enumerate(paragraphs):
        if taken and size + len(paragraph) > limit:
            return "\n\n".join(taken), paragraphs[i:]
        taken.append(paragraph)
        size += len(paragraph)
    return "\n\n".join(taken), []


def _conversation(key: str, opener: str, paragraphs: list[str]) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    if _pick(key + "#system", "abc") != "c":
        messages.append({"role": "system", "content": _pick(key, _SYSTEM_PROMPTS)})
    first, rest = _answer(paragraphs, 1200)
    messages += [{"role": "user", "content": opener},
                 {"role": "assistant", "content": first},
                 {"role": "user", "content": _pick(key + "#follow", _FOLLOW_UPS)}]
    if rest and _pick(key + "#long", "ab") == "a":
        second, _ = _answer(rest, 900)
        messages += [{"role": "assistant", "content": second},
                     {"role": "user", "content": _pick(key + "#again", _SECOND_FOLLOW_UPS)}]
    return messages


def _reference_topics() -> dict[str, str]:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions split the reference text out of the stdlib
        return {}
    return dict(topics)


def _chat() -> Iterator[list[dict[str, str]]]:
    for key, text in sorted(_reference_topics().items()):
        title, _, rest = text.strip().partition("\n")
        body = _paragraphs(rest)
        if not body:
            continue
        lowered = title[0].lower() + title[1:]
        for variant in range(2):
            opener = _pick(f"{key}#{variant}", _TOPIC_OPENERS).format(title=lowered)
            yield _conversation(f"{key}#{variant}", opener, body)
    for module in _modules():
        match = _MODULE_DOC.match(module.text)
        if match is None or module.dotted.startswith("_"):
            continue
        paragraphs = _paragraphs(match.group(1))
        if not paragraphs or len(" ".join(paragraphs)) < 200:
            continue
        opener = _pick(module.relpath, _MODULE_OPENERS).format(module=module.dotted)
        yield _conversation(module.relpath, opener, paragraphs)
