from pathlib import Path

text = Path("/app/hello.txt").read_text().strip()
assert text == "Hello, world!", repr(text)
print("1 passed")
