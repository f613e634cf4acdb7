"""Memory plans of both stacks, printed the same way."""

GIB = 1024**3
BYTES = {"bfloat16": 2, "float32": 4}  # per parameter of a model dtype


def format_parts(parts, capacity=None, capacity_name="per device", width=17):
    """One line per component in GiB, and the share of `capacity` planned."""
    lines = [f"  {name:<{width}} {value / GIB:8.2f} GiB" for name, value in parts.items()]
    if capacity:
        lines.append(f"  {capacity_name:<{width}} {capacity / GIB:8.2f} GiB "
                     f"({100 * parts['total'] / capacity:.0f}% planned)")
    return "\n".join(lines)
