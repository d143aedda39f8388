//! The logical fields of a tool that search reads, shared by the index, the ranking parameters
//! and the word lists.

use super::query::FieldScope;

/// The logical fields of a tool that search reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    Name = 0,
    Description = 1,
    ParamNames = 2,
    ParamDescriptions = 3,
    Server = 4,
    Category = 5,
    Tags = 6,
}

pub const FIELD_COUNT: usize = 7;

impl Field {
    pub const ALL: [Field; FIELD_COUNT] = [
        Field::Name,
        Field::Description,
        Field::ParamNames,
        Field::ParamDescriptions,
        Field::Server,
        Field::Category,
        Field::Tags,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Description => "description",
            Field::ParamNames => "parameters",
            Field::ParamDescriptions => "parameter_descriptions",
            Field::Server => "server",
            Field::Category => "category",
            Field::Tags => "tags",
        }
    }

    pub fn in_scope(scope: Option<FieldScope>) -> &'static [Field] {
        match scope {
            None => &Field::ALL,
            Some(FieldScope::Name) => &[Field::Name],
            Some(FieldScope::Description) => &[Field::Description],
            Some(FieldScope::Params) => &[Field::ParamNames, Field::ParamDescriptions],
            Some(FieldScope::Server) => &[Field::Server],
            Some(FieldScope::Category) => &[Field::Category],
            Some(FieldScope::Tags) => &[Field::Tags],
        }
    }
}
