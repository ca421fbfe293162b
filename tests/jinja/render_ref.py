#!/usr/bin/env python3
"""render_ref.py - the reference for vt's chat-template interpreter
(core/src/text/jinja*.c): renders templates as Hugging Face transformers'
apply_chat_template does (its jinja2 environment: ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and the loopcontrols extension; tojson as
json.dumps with ensure_ascii=False and no key sorting; the globals
raise_exception and strftime_now).

usage: render_ref.py OUT_DIR CONVERSATIONS.json CASES.json TEMPLATE...
  OUT_DIR/conv.<i>.json                 conversation i's variables (json.dumps)
  OUT_DIR/<template file name>.<i>.txt  each template with conversation i's variables
  OUT_DIR/case.<i>.jinja, .json, .txt   case i of CASES.json ({"template", "vars"}):
                                        its template, variables and rendering
A .txt holds the rendered text, or "ERROR: <message>" when rendering raised.
Prints "<conversations> <cases>". Exit 2 when Python's jinja2 is missing.
"""
import json
import os
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(2)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = strftime_now


def render(source, variables):
    try:
        return ENV.from_string(source).render(**variables)
    except Exception as e:
        return "ERROR: %s" % e


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main():
    out, conversations, cases = sys.argv[1:4]
    with open(conversations, encoding="utf-8") as f:
        convs = json.load(f)
    with open(cases, encoding="utf-8") as f:
        small = json.load(f)
    for i, c in enumerate(convs):
        write(os.path.join(out, "conv.%d.json" % i), json.dumps(c["vars"], ensure_ascii=False))
    for template in sys.argv[4:]:
        with open(template, encoding="utf-8") as f:
            source = f.read()
        name = os.path.basename(template)
        for i, c in enumerate(convs):
            write(os.path.join(out, "%s.%d.txt" % (name, i)), render(source, c["vars"]))
    for i, c in enumerate(small):
        write(os.path.join(out, "case.%d.jinja" % i), c["template"])
        write(os.path.join(out, "case.%d.json" % i), json.dumps(c.get("vars", {}), ensure_ascii=False))
        write(os.path.join(out, "case.%d.txt" % i), render(c["template"], c.get("vars", {})))
    print(len(convs), len(small))


main()
