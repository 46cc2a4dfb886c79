fn main() {
    println!("flower");
}
