"""Training corpus: the King James Bible from Debian's bible-kjv-text (read with bible-kjv's
`bible` program). Layout: per chapter a heading line "Genesis 1", then one verse per line
(verse numbers dropped), a blank line after each chapter; books are separate documents."""
import re
import subprocess


def package_version(pkg="bible-kjv-text"):
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                          check=True).stdout.strip()


def books():
    """List of book texts."""
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, check=True).stdout
    docs, cur, book = [], [], None
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            cur.append(m.group(1).strip() + "\n")
            continue
        h = re.match(r"^(.*\S) (\d+)$", line.strip())
        if not h:
            raise ValueError("unexpected line: " + line)
        if h.group(1) != book:
            if cur:
                docs.append("".join(cur))
            cur, book = [], h.group(1)
        elif cur:
            cur.append("\n")
        cur.append(line.strip() + "\n")
    if cur:
        docs.append("".join(cur))
    return docs


if __name__ == "__main__":
    b = books()
    print(len(b), "books", sum(map(len, b)), "chars, bible-kjv-text", package_version())
    print(b[0][:300])
