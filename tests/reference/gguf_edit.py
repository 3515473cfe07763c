"""GGUF files edited with gguf-py (llama.cpp's own writer): the checks add syslm's keys and
tensors to converted models, or drop tensors, without going through syslm's writer."""
import numpy as np


def rewrite(src, dst, keys=None, drop=(), tensors=None):
    """Copies every key and tensor of src into dst, adding `keys` (name -> bool | int (uint32) |
    list of ints (int32 array)), leaving out tensors whose names start with a prefix in `drop`,
    and appending `tensors` (name -> float32 array)."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), reader.get_field("general.architecture").contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = gguf.GGUFValueType(field.types[0])
        sub = gguf.GGUFValueType(field.types[1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for name, value in (keys or {}).items():
        if isinstance(value, bool):
            writer.add_bool(name, value)
        elif isinstance(value, int):
            writer.add_uint32(name, value)
        else:
            writer.add_array(name, list(value))
    for t in reader.tensors:
        if not any(t.name.startswith(p) for p in drop):
            writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, value in (tensors or {}).items():
        writer.add_tensor(name, np.asarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
