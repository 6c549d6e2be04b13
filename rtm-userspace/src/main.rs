fn main() { println!("{}", rtm::EBPF_OBJECT.len()); }
